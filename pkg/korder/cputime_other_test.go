//go:build !unix

package korder_test

import "time"

// processCPU is not measured here: the CPU-time ratios are not reported.
func processCPU() time.Duration { return 0 }
