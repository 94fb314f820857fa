package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type evKind string

const (
	evProduce   evKind = "produce"
	evPromise   evKind = "promise"
	evQueue     evKind = "queue"
	evDrop      evKind = "drop"
	evHook      evKind = "hook"
	evRecover   evKind = "recover"
	evTxn       evKind = "txn"
	evFault     evKind = "fault"
	evLog       evKind = "log"
	evPhase     evKind = "phase"
	evViolation evKind = "VIOLATION"
)

// event is one line of a run's history. rec and att are -1 when not about a
// record; part is -2 when not about a partition (-1 is the topic).
type event struct {
	at   time.Duration
	kind evKind
	rec  int
	att  int
	desc string
	part int32
	msg  string
}

func (e event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%9.3fms %-9s", float64(e.at.Microseconds())/1000, e.kind)
	if e.rec >= 0 {
		fmt.Fprintf(&b, " %s", e.desc)
	}
	if e.att >= 0 {
		fmt.Fprintf(&b, " att#%d", e.att)
	}
	if e.rec < 0 && e.part >= -1 {
		fmt.Fprintf(&b, " part=%d", e.part)
	}
	fmt.Fprintf(&b, " %s", e.msg)
	return b.String()
}

// history is the append-only log of a run. Its lock is a leaf.
type history struct {
	start time.Time
	mu    sync.Mutex
	evs   []event
}

func (h *history) add(kind evKind, rr *rec, a *attempt, part int32, msg string) {
	e := event{at: time.Since(h.start), kind: kind, rec: -1, att: -1, part: part, msg: msg}
	if rr != nil {
		e.rec, e.desc = rr.id, rr.String()
	}
	if a != nil {
		e.att = a.id
	}
	h.mu.Lock()
	h.evs = append(h.evs, e)
	h.mu.Unlock()
}

func (h *history) snapshot() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.evs)
}

// violation is one broken property of a run.
type violation struct {
	kind string
	msg  string
	recs []int // records involved, for the excerpt
	part int32 // partition involved, -2 if none
}

// streamKey names an ordered stream: one producer's records to one partition
// (byKey false) or with one key (byKey true).
type streamKey struct {
	byKey bool
	prod  int
	n     int
}

// check reads what was written and checks it against what was produced. It
// runs once nothing else of the run is running.
func (r *run) check(logs [][]*kgo.Record, out *outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out.records = len(r.recs)

	// Decode the log.
	type occ struct {
		part     int32
		offset   int64
		att, buf int // the copy's stamp (see stampHook)
	}
	occs := make(map[int]([]occ))
	atOffset := make([]map[int64]int, len(logs))
	for p, log := range logs {
		atOffset[p] = make(map[int64]int)
		for _, kr := range log {
			id, ok := r.decode(kr)
			if !ok {
				r.violate("corrupt", nil, "partition %d offset %d holds %q (key %q), not a record of this run", p, kr.Offset, kr.Value, kr.Key)
				continue
			}
			att, buf := stamp(kr)
			occs[id] = append(occs[id], occ{int32(p), kr.Offset, att, buf})
			atOffset[p][kr.Offset] = id
		}
	}

	// Order: in each stream, the first copies of the records appear in
	// sequence order; a later copy of a record already written is a
	// duplicate, not a reorder.
	seen := make(map[int]bool)
	maxFirst := make(map[streamKey]*rec)
	flagged := make(map[int]bool)
	for _, log := range logs {
		for _, kr := range log {
			id, ok := r.decode(kr)
			if !ok {
				continue
			}
			rr := r.recs[id]
			if seen[id] {
				// Who wrote this copy again: a copy of the same
				// Produce call is kgo's (or kfake's) doing, never
				// documented; another one is a re-produce.
				first := occs[id][0]
				att, buf := stamp(kr)
				who := fmt.Sprintf("kgo wrote one Produce call twice (attempt %d, call %d)", att, buf)
				switch {
				case att != first.att:
					who = fmt.Sprintf("the test produced it again (attempts %d and %d)", first.att, att)
				case buf != first.buf:
					who = fmt.Sprintf("korder produced it again (attempt %d, Produce calls %d and %d)", att, first.buf, buf)
				}
				if att != first.att && first.att < len(r.attempts) && r.attempts[first.att].unconfirmed {
					out.documented++
					r.hist.add(evPhase, rr, nil, rr.part, fmt.Sprintf("checker: documented duplicate at offset %d (copies at %v): %s; the first copy is of a transaction whose commit failed with an unknown outcome (kgo's EndTransaction doc), which committed", kr.Offset, occs[id], who))
					continue
				}
				if (att != first.att || buf != first.buf) && r.nonRetryableAfterUnsureLocked(rr) {
					out.documented++
					r.hist.add(evPhase, rr, nil, rr.part, fmt.Sprintf("checker: documented duplicate at offset %d (copies at %v): %s; idempotent, reported failed with an error saying it may have been written, or with a non-retryable error, which a resend after a lost response can get although the first attempt was written", kr.Offset, occs[id], who))
					continue
				}
				out.duplicates++
				r.hist.add(evPhase, rr, nil, rr.part, fmt.Sprintf("checker: duplicate copy at offset %d (copies at %v): %s", kr.Offset, occs[id], who))
				continue
			}
			seen[id] = true
			for _, sk := range []streamKey{{false, rr.prod, int(rr.part)}, {true, rr.prod, rr.key}} {
				prev := maxFirst[sk]
				seq, prevSeq := rr.partSeq, 0
				if prev != nil {
					prevSeq = prev.partSeq
				}
				if sk.byKey {
					seq = rr.keySeq
					if prev != nil {
						prevSeq = prev.keySeq
					}
				}
				if prev == nil || seq > prevSeq {
					maxFirst[sk] = rr
					continue
				}
				if flagged[id] {
					continue
				}
				flagged[id] = true
				what := "partition"
				if sk.byKey {
					what = "key"
				}
				if r.maybeWrittenLocked(rr) {
					out.documented++
					r.hist.add(evPhase, rr, nil, rr.part, fmt.Sprintf("documented reorder (non-idempotent, an attempt failed with a timeout or cancellation and may have been written) after %v", prev))
					continue
				}
				r.violate("order", []*rec{rr, prev}, "per-%s order: %v first written at offset %d of partition %d, after %v (sequence %d after %d)",
					what, rr, kr.Offset, rr.part, prev, seq, prevSeq)
			}
		}
	}
	out.written = len(seen)

	// Loss, and acknowledged offsets.
	for _, rr := range r.recs {
		switch {
		case rr.state == recDropped:
			out.dropped++
		case len(occs[rr.id]) == 0:
			out.lost++
			r.violate("lost", []*rec{rr}, "%v (state %d, %d attempts) is not in the log and was not reported dropped", rr, rr.state, len(rr.attempts))
		}
		for _, a := range rr.attempts {
			switch {
			case a.acked():
				if got, ok := atOffset[rr.part][a.offset]; !ok || got != rr.id {
					r.violate("ack", []*rec{rr}, "%v acknowledged at offset %d of partition %d, which holds record %d (present %v)", rr, a.offset, rr.part, got, ok)
				}
			case a.promised == 1 && a.err == nil && a.txn > 0 && !a.unconfirmed:
				// Written in a transaction that aborted (or never
				// ended): a read-committed consumer must not see it.
				if got, ok := atOffset[rr.part][a.offset]; ok {
					r.violate("aborted", []*rec{rr}, "%v was written at offset %d of partition %d in transaction %d, which did not commit, yet the committed log holds record %d there", rr, a.offset, rr.part, a.txn, got)
				}
			}
		}
	}

	r.checkStopped(func(rr *rec) bool { return len(occs[rr.id]) > 0 })

	// The fail-stop guarantee, directly: between two recoveries of a
	// partition, nothing handed to kgo after a record that failed is
	// written.
	if r.rc.mode == modeFailStop {
		type pe struct {
			part  int32
			epoch int
		}
		firstFail := make(map[pe]*attempt)
		for _, a := range r.attempts {
			k := pe{a.rec.part, a.epoch}
			if a.promised == 1 && a.err != nil && (firstFail[k] == nil || a.handoff < firstFail[k].handoff) {
				firstFail[k] = a
			}
		}
		for _, a := range r.attempts {
			f := firstFail[pe{a.rec.part, a.epoch}]
			if f != nil && a.promised == 1 && a.err == nil && a.handoff > f.handoff {
				r.violate("failstop", []*rec{a.rec, f.rec}, "%v (attempt %d, hand-off %d) was written at offset %d after %v (attempt %d, hand-off %d) failed with %v, with no recovery in between",
					a.rec, a.id, a.handoff, a.offset, f.rec, f.id, f.handoff, f.err)
			}
		}
	}
}

// checkStopped (korder, outside transactions) asserts Stop's contract: no
// record produced after a record of its partition that got ErrStopped, and
// before the next Resume, is written. Both are in call order (korder's Stop
// and Resume docs), and calls that overlap are concurrent, unordered: the
// written record's Produce call must have begun after the stopped record's
// returned (a.at > st.ret), and no Resume call may overlap or follow the
// stopped record's Produce call (ret > st.at) while overlapping or preceding
// the written record's (at < a.ret). So a record whose Produce overlaps a
// Resume (blocked in kgo on MaxBufferedRecords, say) may go either way. A
// record that failed with an error saying it may have been written
// (kgo.ErrPossiblyWritten, which korder's errors wrap) may be in the log.
func (r *run) checkStopped(written func(*rec) bool) {
	if r.rc.mode != modeKorder || r.rc.txn() {
		return
	}
	for _, a := range r.attempts {
		// Without idempotency, a record that failed after a request of
		// it was retried may be in the log, whatever the final error:
		// only a record acknowledged written counts there.
		if !a.acked() && (len(a.rec.attempts) > 1 || !written(a.rec) || isPossiblyWritten(a.err) || !r.rc.idempotent()) {
			continue
		}
		for _, st := range r.parts[a.rec.part].stops {
			if st.ret < a.at && !slices.ContainsFunc(r.resumes, func(rs *call) bool { return rs.ret > st.at && rs.at < a.ret }) {
				r.violate("stop", []*rec{a.rec, st.rec}, "%v (attempt %d, Produce at order %d returned at %d) was written, but it was produced after %v (Produce at order %d returned at %d) of partition %d got ErrStopped, and before Resume", a.rec, a.id, a.at, a.ret, st.rec, st.at, st.ret, a.rec.part)
				break
			}
		}
	}
}

// checkDeadLetters (korder): every record korder reported dead-lettered (in
// a transaction: one that committed) has a copy in the dead-letter topic,
// with its key and value, and the korder-topic header naming the topic.
func (r *run) checkDeadLetters(dlq []*kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := make(map[int]bool)
	for _, kr := range dlq {
		var id int
		if _, err := fmt.Sscanf(string(kr.Value), "%d/", &id); err != nil || id < 0 || id >= len(r.recs) {
			r.violate("deadletter", nil, "dead-letter offset %d holds %q, not a record of this run", kr.Offset, kr.Value)
			continue
		}
		rr := r.recs[id]
		topic := ""
		for _, h := range kr.Headers {
			if h.Key == "korder-topic" {
				topic = string(h.Value)
			}
		}
		if string(kr.Value) != string(rr.value()) || string(kr.Key) != rr.keyName() || topic != chaosTopic {
			r.violate("deadletter", []*rec{rr}, "dead-letter offset %d holds key %q value %q topic header %q; %v has key %q value %q", kr.Offset, kr.Key, kr.Value, topic, rr, rr.keyName(), rr.value())
		}
		in[id] = true
	}
	for _, rr := range r.recs {
		if rr.state == recDropped && rr.outcome == "dead-lettered" && !in[rr.id] {
			r.violate("deadletter", []*rec{rr}, "%v: korder reported it dead-lettered, but the dead-letter topic does not hold it", rr)
		}
	}
}

// maybeWrittenLocked: without idempotency, a record that failed on a timeout,
// RecordRetries or a canceled context may have been written anyway (documented on
// FailPartitionOnProduceFailure), possibly after records produced later. In
// modeKorder, the attempts kgo saw are korder's (rec.kgoErrs).
func (r *run) maybeWrittenLocked(rr *rec) bool {
	if r.rc.idempotent() {
		return false
	}
	unknown := func(err error) bool { // RecordRetries: a retried request's response may have been lost
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries)
	}
	for _, a := range rr.attempts {
		if a.err != nil && unknown(a.err) {
			return true
		}
	}
	return slices.ContainsFunc(rr.kgoErrs, unknown) // korder's own attempts
}

// nonRetryableAfterUnsureLocked: with idempotency, a batch whose request may
// have been written is retried until the broker answers, so a failed record
// was not written, unless a resend was answered with a non-retryable error
// the broker checks before duplicates (the faults inject such errors on any
// request), or the broker lost the producer state; the record may then be in
// the log, and producing it again duplicates it (documented on
// FailPartitionOnProduceFailure; reproduced by
// TestLostResponseThenNonRetryable). Patched kgo says so with
// ErrPossiblyWritten. CORRUPT_MESSAGE counts as non-retryable: kerr marks it
// retriable, but kgo fails the batch on it.
func (r *run) nonRetryableAfterUnsureLocked(rr *rec) bool {
	if !r.rc.idempotent() {
		return false
	}
	nonRetryable := func(err error) bool {
		var ke *kerr.Error
		return isPossiblyWritten(err) || errors.As(err, &ke) && (!ke.Retriable || ke == kerr.CorruptMessage)
	}
	for _, a := range rr.attempts {
		if a.err != nil && nonRetryable(a.err) {
			return true
		}
	}
	return slices.ContainsFunc(rr.kgoErrs, nonRetryable)
}

func (r *run) decode(kr *kgo.Record) (int, bool) {
	f := strings.Split(string(kr.Value), "/")
	if len(f) != 5 {
		return 0, false
	}
	var n [5]int
	for i, s := range f {
		v, err := strconv.Atoi(s)
		if err != nil {
			return 0, false
		}
		n[i] = v
	}
	if n[0] < 0 || n[0] >= len(r.recs) {
		return 0, false
	}
	rr := r.recs[n[0]]
	if rr.prod != n[1] || rr.key != n[2] || rr.keySeq != n[3] || rr.partSeq != n[4] || rr.part != kr.Partition || string(kr.Key) != rr.keyName() {
		return 0, false
	}
	return rr.id, true
}

// excerpt is the smallest part of the history showing v: every event of the
// records involved, and the hooks and recoveries of their partition (or
// topic) between the first and the last of those.
func excerpt(evs []event, v violation) []event {
	if len(v.recs) == 0 {
		return nil
	}
	first, last := -1, -1
	for i, e := range evs {
		if slices.Contains(v.recs, e.rec) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	var out []event
	for _, e := range evs[first : last+1] {
		switch {
		case slices.Contains(v.recs, e.rec):
		case (e.kind == evHook || e.kind == evRecover || e.kind == evTxn) && (e.part == v.part || e.part == -1 || e.part == -2):
		case e.kind == evFault && (!strings.Contains(e.msg, "partition ") || strings.Contains(e.msg, fmt.Sprintf("partition %d ", v.part)) || strings.HasSuffix(e.msg, fmt.Sprintf("partition %d", v.part))):
		default:
			continue
		}
		out = append(out, e)
	}
	const maxLines = 60
	if len(out) > maxLines {
		out = append(out[:maxLines/2:maxLines/2], out[len(out)-maxLines/2:]...)
	}
	return out
}

// report formats an outcome's violations: the seed and configuration, the
// fault schedule, an excerpt per violation, and writes the whole history to
// dir. It returns the text to print.
func (o *outcome) report(hist *history, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CHAOS VIOLATION: %d violations\n  config: %v\n  reproduce: CHAOS_SEED=%d go test -race -run 'TestChaosSeed' ./tests/chaos (mode %s)\n", len(o.viol), o.rc, o.rc.seed, o.rc.mode)
	fmt.Fprintf(&b, "  fault schedule (%d):\n", len(o.faults))
	for i, f := range o.faults {
		if i == 40 {
			fmt.Fprintf(&b, "    ... %d more in the history file\n", len(o.faults)-i)
			break
		}
		fmt.Fprintf(&b, "    %s\n", f)
	}
	evs := hist.snapshot()
	for i, v := range o.viol {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more violations in the history file\n", len(o.viol)-i)
			break
		}
		fmt.Fprintf(&b, "  [%s] %s\n", v.kind, v.msg)
		for _, e := range excerpt(evs, v) {
			fmt.Fprintf(&b, "      %v\n", e)
		}
	}
	if dir != "" {
		name := filepath.Join(dir, fmt.Sprintf("chaos-seed%d-%s.history", o.rc.seed, o.rc.mode))
		var f strings.Builder
		fmt.Fprintf(&f, "config: %v\n\nfaults:\n", o.rc)
		for _, l := range o.faults {
			fmt.Fprintf(&f, "  %s\n", l)
		}
		f.WriteString("\nviolations:\n")
		for _, v := range o.viol {
			fmt.Fprintf(&f, "  [%s] %s\n", v.kind, v.msg)
		}
		f.WriteString("\nhistory:\n")
		for _, e := range evs {
			fmt.Fprintf(&f, "%v\n", e)
		}
		if err := os.WriteFile(name, []byte(f.String()), 0o644); err != nil {
			fmt.Fprintf(&b, "  writing the history: %v\n", err)
		} else {
			fmt.Fprintf(&b, "  full history: %s\n", name)
		}
	}
	return b.String()
}
