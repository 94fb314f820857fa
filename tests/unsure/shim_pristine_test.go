//go:build pristine

package unsure_test

// Pristine franz-go v1.22.3 has no kgo.ErrPossiblyWritten: no error says that
// a failed record may have been written.
func isPossiblyWritten(error) bool { return false }
