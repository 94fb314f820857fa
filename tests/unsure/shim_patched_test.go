//go:build !pristine

package unsure_test

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// isPossiblyWritten reports whether err says that its record may have been
// written although it failed. shim_pristine_test.go stands in for it on
// pristine franz-go v1.22.3, which has no kgo.ErrPossiblyWritten.
func isPossiblyWritten(err error) bool { return errors.Is(err, kgo.ErrPossiblyWritten) }
