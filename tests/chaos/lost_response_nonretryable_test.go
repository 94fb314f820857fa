package chaos_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestLostResponseThenNonRetryable: the broker wrote r1 and the response
// was lost, so r1's batch is unsure; the resend is then answered with a
// non-retryable error that the broker checks before its duplicate check
// (MESSAGE_TOO_LARGE here; a real broker validates a batch's size and CRC
// before it looks at producer state, and checks authorization before either,
// so a lowered max.message.bytes or a revoked ACL does the same). kgo fails
// r1 with that error, as it does after REQUEST_TIMED_OUT, although r1 is in
// the log (suspected cause of the 10 duplicates of seed 1012,
// idempotent/korder-drop). Patched ("kgo: never renumber a batch that may
// already have been written"), the error wraps kgo.ErrPossiblyWritten, so
// that a recovery does not produce r1 again silently. Pristine v1.22.3 fails
// r1 with MESSAGE_TOO_LARGE alone: this test fails there.
func TestLostResponseThenNonRetryable(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name string
		txn  bool
	}{
		{"idempotent", false},
		{"transactional", true},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			testLostResponse(t, test.txn, true, kerr.MessageTooLarge, 1, true)
		})
	}
}
