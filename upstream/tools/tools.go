//go:build tools

// Package tools pins the developer tools of this repository (golangci-lint,
// benchstat) outside the main go.mod, so that users of the main module never
// inherit them.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
