package chaos_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkRun is a run of one partition with n records, for the checker alone;
// no cluster or client.
func checkRun(m mode, n int) *run {
	r := &run{rc: runConfig{mode: m, kind: kindIdempotent}, parts: []*partState{{}}}
	for i := range n {
		r.recs = append(r.recs, &rec{id: i, partSeq: i})
	}
	return r
}

// handoffForCheck registers an attempt of rr ordered at, failed with err
// (nil: written at offset).
func (r *run) handoffForCheck(rr *rec, at int64, err error, offset int64) *attempt {
	a := &attempt{id: len(r.attempts), rec: rr, at: at, promised: 1, err: err, offset: offset}
	if err != nil {
		a.offset = -1
	}
	r.attempts = append(r.attempts, a)
	rr.attempts = append(rr.attempts, a)
	rr.state = recOK
	return a
}

// copyOf is the copy of attempt a at offset, written by its calls-th Produce
// call.
func copyOf(a *attempt, calls int, offset int64) *kgo.Record {
	kr := a.rec.record(a.id)
	for range calls {
		stampHook{}.OnProduceRecordBuffered(kr)
	}
	kr.Offset = offset
	return kr
}

func (r *run) checkedHistory() string {
	var b strings.Builder
	for _, e := range r.hist.snapshot() {
		fmt.Fprintln(&b, e)
	}
	return b.String()
}

// TestCheckerDuplicates: the checker names who wrote a copy again, and
// documents a re-produce of a record that failed with an error that may
// follow a write (non-retryable, or CORRUPT_MESSAGE, which kerr marks
// retriable), but never a copy that one Produce call wrote twice.
func TestCheckerDuplicates(t *testing.T) {
	for _, test := range []struct {
		name       string
		firstErr   error // the first attempt's failure, nil: one attempt
		calls      int   // Produce calls of the first attempt before its second copy
		documented bool
		who        string
	}{
		{"kgo resend", nil, 1, false, "kgo wrote one Produce call twice"},
		{"test re-produce after CORRUPT_MESSAGE", kerr.CorruptMessage, 1, true, "the test produced it again"},
		{"test re-produce after NOT_ENOUGH_REPLICAS", kerr.NotEnoughReplicas, 1, false, "the test produced it again"},
		{"korder re-produce after MESSAGE_TOO_LARGE", kerr.MessageTooLarge, 2, true, "korder produced it again"},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := checkRun(modeNaive, 1)
			rr := r.recs[0]
			a := r.handoffForCheck(rr, 1, nil, 0)
			log := []*kgo.Record{copyOf(a, 1, 0)}
			switch {
			case test.firstErr == nil:
				log = append(log, copyOf(a, 1, 1))
			case test.calls > 1: // korder's own second Produce call
				a.err, a.offset = test.firstErr, -1
				rr.kgoErrs = append(rr.kgoErrs, test.firstErr)
				log = append(log, copyOf(a, test.calls, 1))
			default: // the test's second attempt
				a.err, a.offset = test.firstErr, -1
				b := r.handoffForCheck(rr, 2, nil, 1)
				log = append(log, copyOf(b, 1, 1))
			}
			out := &outcome{}
			r.check([][]*kgo.Record{log}, out)
			if out.duplicates+out.documented != 1 || (out.documented == 1) != test.documented {
				t.Errorf("duplicates=%d documented=%d, want documented %v", out.duplicates, out.documented, test.documented)
			}
			if h := r.checkedHistory(); !strings.Contains(h, test.who) {
				t.Errorf("history does not say %q:\n%s", test.who, h)
			}
		})
	}
}

// TestCheckerStop: with korder outside transactions, a record produced
// after a record of its partition got ErrStopped (its Produce call began
// after the stopped record's returned), and before Resume (its Produce call
// returned before Resume was called), must not be written; a call that
// overlaps either may go either way.
func TestCheckerStop(t *testing.T) {
	for _, test := range []struct {
		name            string
		xAt, xRet       int64 // the stopped record's Produce call
		yAt, yRet       int64 // the written record's
		resume, resumed int64 // a Resume call, 0 for none
		viol            bool
	}{
		{"written before Resume", 1, 2, 4, 5, 0, 0, true},
		{"written after Resume", 1, 2, 6, 7, 3, 4, false},
		{"returned before Resume", 1, 2, 4, 5, 6, 7, true},
		{"Resume returned before the stopped record", 3, 4, 5, 6, 1, 2, true},
		{"concurrent with Resume", 1, 2, 4, 6, 5, 7, false},
		{"both concurrent with Resume", 2, 3, 4, 5, 1, 6, false},
		{"concurrent with the stopped record", 1, 5, 3, 4, 0, 0, false},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := checkRun(modeKorder, 2)
			x := r.handoffForCheck(r.recs[0], test.xAt, fmt.Errorf("stopped: %w", kerr.InvalidRecord), 0)
			x.ret = test.xRet
			r.parts[0].stops = []*attempt{x}
			if test.resume > 0 {
				r.resumes = []*call{{test.resume, test.resumed}}
			}
			y := r.handoffForCheck(r.recs[1], test.yAt, nil, 0)
			y.ret = test.yRet
			r.check([][]*kgo.Record{{copyOf(y, 1, 0)}}, &outcome{})
			var stops int
			for _, v := range r.viol {
				if v.kind == "stop" {
					stops++
				}
			}
			if (stops > 0) != test.viol {
				t.Errorf("stop violations %d, want any: %v (%v)", stops, test.viol, r.viol)
			}
		})
	}
}

// A commit that failed with a transport error or UNKNOWN_SERVER_ERROR has an
// unknown outcome (kgo's EndTransaction doc); a broker's refusal, or the
// option's own refusal, does not.
func TestCommitUnconfirmed(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("unable to dial: dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{kerr.UnknownServerError, true},
		{fmt.Errorf("the transaction cannot commit, abort it: %w", kerr.TransactionAbortable), false},
		{kerr.OperationNotAttempted, false},
	} {
		if got := commitUnconfirmed(c.err); got != c.want {
			t.Errorf("commitUnconfirmed(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Without idempotency, a record that failed after a retry may have been
// written (a retried request's response was lost), whatever the final error:
// in the log after a stopped record, it is documented, not a Stop violation.
// With idempotency, it is one.
func TestCheckerStopMaybeWritten(t *testing.T) {
	for _, k := range []kind{kindIdempotent, kindNonIdempotent} {
		r := checkRun(modeKorder, 2)
		r.rc.kind = k
		x := r.handoffForCheck(r.recs[0], 1, fmt.Errorf("stopped: %w", kerr.InvalidRecord), 0)
		x.ret = 2
		r.parts[0].stops = []*attempt{x}
		y := r.handoffForCheck(r.recs[1], 3, fmt.Errorf("stopped: %w", kerr.MessageTooLarge), 0)
		y.ret = 4
		r.check([][]*kgo.Record{{copyOf(y, 1, 0)}}, &outcome{})
		stops := slices.ContainsFunc(r.viol, func(v violation) bool { return v.kind == "stop" })
		if want := k == kindIdempotent; stops != want {
			t.Errorf("kind %v: stop violation %v, want %v (%v)", k, stops, want, r.viol)
		}
	}
}
