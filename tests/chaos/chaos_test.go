// Package chaos_test is a seeded chaos harness for FailPartitionOnProduceFailure.
//
// A run (runChaos) starts a kfake cluster and one producing client from a
// runConfig derived from a seed: 1-3 brokers, 1-16 partitions, 1-4 producer
// goroutines producing keyed records (ManualPartitioner, key -> partition)
// whose value carries (record id, producer, key, per-key sequence,
// per-partition sequence), idempotent or not (1 in flight), a codec, linger,
// RecordRetries, sometimes RecordDeliveryTimeout and short request timeouts.
// A ticker-driven scheduler draws a fault per tick from the seed (or the
// fuzzer's bytes): broker errors for N requests, NOT_ENOUGH_REPLICAS for a
// while, held responses, dropped connections, leader moves, canceled record
// contexts. After the producing phase the faults are removed, every record is
// driven to success or to "dropped and reported", Flush and Close must
// return, and a separate consumer reads every partition back for the checker
// (check_test.go): per-stream order of first copies, no loss, acknowledged
// offsets, promises called exactly once, the fail-stop guarantee itself (no
// record handed to kgo after a failed one is written before the next
// recovery), and no goroutine leak.
//
// modeFailStop runs the option with the recovery protocol of harness_test.go;
// modeNaive runs the option off and re-produces failures from their promise:
// the baseline, which must show violations (also on pristine v1.22.3, built
// with -tags pristine, see tests/chaos.sh).
package chaos_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Entry points. Every run is described by runConfig (config_test.go), driven
// by runChaos (harness_test.go) and the fault scheduler (sched_test.go), and
// checked by check (check_test.go).

func outDir(t testing.TB) string {
	if d := os.Getenv("CHAOS_OUT"); d != "" {
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return t.TempDir()
}

func (o *outcome) line() string {
	return fmt.Sprintf("%-8s seed=%-6d recs=%-5d written=%-5d dup=%-3d dropped=%-3d lost=%d unfinished=%d failed=%-4d rejected=%-4d hooks=%-3d recoveries=%-3d documented=%d violations=%d faults=%d %v | %v",
		o.rc.mode, o.rc.seed, o.records, o.written, o.duplicates, o.dropped, o.lost, o.unfinished, o.hardFails, o.rejected, o.hooks, o.recoveries, o.documented, len(o.viol), len(o.faults), o.elapsed.Truncate(time.Millisecond), o.rc)
}

// shortSeeds were picked to cover 1-3 brokers, idempotent and not, every
// codec, and every fault kind (see TestChaosShort's log with -v).
var shortSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

// TestChaosShort runs a few fixed seeds with the option on and the recovery
// protocol, each with 400ms of producing under faults; any violation fails.
func TestChaosShort(t *testing.T) {
	if !failStopAvailable {
		t.Skip("pristine franz-go: FailPartitionOnProduceFailure is not compiled in")
	}
	for _, seed := range shortSeeds {
		o := runChaos(newConfig(seed, modeFailStop, false), nil)
		t.Log(o.line())
		if len(o.viol) > 0 {
			t.Error(o.report(o.hist, outDir(t)))
		}
	}
}

// TestChaosSeed reproduces one run: CHAOS_SEED, CHAOS_MODE (failstop or
// naive), CHAOS_LONG=1 for the 2-5s producing phase of TestChaos, CHAOS_KEEP=1
// to write the history even without a violation (to CHAOS_OUT).
func TestChaosSeed(t *testing.T) {
	s := os.Getenv("CHAOS_SEED")
	if s == "" {
		t.Skip("set CHAOS_SEED")
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	m := modeFailStop
	if os.Getenv("CHAOS_MODE") == "naive" || !failStopAvailable {
		m = modeNaive
	}
	o := runChaos(newConfig(seed, m, os.Getenv("CHAOS_LONG") == "1"), nil)
	t.Log(o.line())
	for _, f := range o.faults {
		t.Log("  " + f)
	}
	if os.Getenv("CHAOS_KEEP") != "" && len(o.viol) == 0 {
		t.Log(o.report(o.hist, outDir(t)))
	}
	if len(o.viol) > 0 {
		t.Error(o.report(o.hist, outDir(t)))
	}
}

type totals struct {
	runs, violations, lost, duplicates, unfinished int
}

func (tt *totals) add(o *outcome) {
	tt.runs++
	tt.violations += len(o.viol)
	tt.lost += o.lost
	tt.duplicates += o.duplicates
	tt.unfinished += o.unfinished
}

// TestChaos loops over seeds for CHAOS_SECONDS (from CHAOS_SEED, default
// 1000): each seed runs with the option on and the protocol (patched tree
// only), then with the option off and the naive recovery (the baseline), with
// the same configuration and fault schedule. It prints one line per run and
// the summary line; violations with the option on fail the test.
func TestChaos(t *testing.T) {
	secs := os.Getenv("CHAOS_SECONDS")
	if secs == "" {
		t.Skip("set CHAOS_SECONDS")
	}
	n, err := strconv.Atoi(secs)
	if err != nil {
		t.Fatalf("CHAOS_SECONDS=%q: %v", secs, err)
	}
	base := uint64(1000)
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		if base, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	dir := outDir(t)
	deadline := time.Now().Add(time.Duration(n) * time.Second)
	var fs, naive totals
	for seed := base; time.Now().Before(deadline); seed++ {
		if failStopAvailable {
			o := runChaos(newConfig(seed, modeFailStop, true), nil)
			fs.add(o)
			fmt.Println("chaos run: " + o.line())
			if len(o.viol) > 0 {
				fmt.Print(o.report(o.hist, dir))
				t.Fail()
			}
		}
		b := runChaos(newConfig(seed, modeNaive, true), nil)
		naive.add(b)
		fmt.Println("chaos run: " + b.line())
		if len(b.viol) > 0 {
			// The baseline is expected to violate: keep its
			// history, print only the first lines.
			b.report(b.hist, dir)
			fmt.Printf("  baseline violation (expected): [%s] %s\n", b.viol[0].kind, b.viol[0].msg)
		}
	}
	fmt.Printf("chaos baseline: runs=%d violations=%d lost=%d duplicates=%d unfinished_promises=%d\n",
		naive.runs, naive.violations, naive.lost, naive.duplicates, naive.unfinished)
	fmt.Printf("chaos: runs=%d violations=%d lost=%d duplicates=%d unfinished_promises=%d baseline_violations=%d\n",
		fs.runs, fs.violations, fs.lost, fs.duplicates, fs.unfinished, naive.violations)
	if fs.violations > 0 {
		t.Errorf("%d violations with FailPartitionOnProduceFailure on; histories in %s", fs.violations, dir)
	}
}

// FuzzChaos: the input's first 8 bytes seed the configuration (a short run
// with the option on), the rest is the fault schedule, one byte per choice.
func FuzzChaos(f *testing.F) {
	if !failStopAvailable {
		f.Skip("pristine franz-go: FailPartitionOnProduceFailure is not compiled in")
	}
	// Fault op = byte % 10: 3 broker error, 4 NOT_ENOUGH_REPLICAS, 5
	// delay, 6 dropped connection, 7 leader move, 8 cancel; the bytes
	// after an op are its parameters.
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 3, 1, 0, 2, 0, 3, 2, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 4, 0, 3, 5, 4, 0, 6, 0, 8, 0, 4, 1, 1, 3, 0, 1, 2})
	f.Add([]byte{9, 9, 0, 0, 0, 0, 0, 0, 8, 0, 8, 3, 0, 0, 0, 8, 6, 7, 1, 1, 5, 2, 3, 1, 1, 1})
	f.Add([]byte{42, 7, 0, 0, 0, 0, 0, 0, 7, 0, 1, 7, 1, 2, 3, 2, 1, 2, 5, 1, 6, 4, 1, 2, 0, 3, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, ch := fuzzConfig(data)
		o := runChaos(rc, ch)
		t.Log(o.line())
		if len(o.viol) > 0 {
			t.Fatal(o.report(o.hist, outDir(t)))
		}
	})
}

// TestChaosCheckerDetects feeds the checker a hand-made history with a
// reorder, a loss, a duplicate and a fail-stop breach, and requires it to
// report each: the harness can tell a bad log from a good one.
func TestChaosCheckerDetects(t *testing.T) {
	r := &run{rc: runConfig{mode: modeFailStop, partitions: 1, idempotent: true}}
	r.hist.start = time.Now()
	r.parts = []*partState{{}}
	mk := func(seq int, state recState) *rec {
		rr := &rec{id: len(r.recs), keySeq: seq, partSeq: seq, state: state}
		r.recs = append(r.recs, rr)
		return rr
	}
	r0, r1, r2 := mk(0, recOK), mk(1, recOK), mk(2, recOK)
	mk(3, recOK)      // lost
	mk(4, recDropped) // dropped and reported: fine
	att := func(rr *rec, handoff int64, epoch int, err error, offset int64) {
		a := &attempt{id: len(r.attempts), rec: rr, handoff: handoff, epoch: epoch, promised: 1, err: err, offset: offset}
		r.attempts = append(r.attempts, a)
		rr.attempts = append(rr.attempts, a)
	}
	att(r0, 0, 0, nil, 0)
	att(r1, 1, 0, fmt.Errorf("INVALID_RECORD"), -1) // failed...
	att(r2, 2, 0, nil, 1)                           // ...and a later one written: fail-stop breach
	att(r1, 3, 1, nil, 2)                           // after a recovery: fine
	kr := func(rr *rec, off int64) *kgo.Record {
		return &kgo.Record{Partition: 0, Offset: off, Key: []byte(rr.keyName()), Value: rr.value()}
	}
	logs := [][]*kgo.Record{{kr(r0, 0), kr(r2, 1), kr(r1, 2), kr(r0, 3)}}
	o := &outcome{rc: r.rc}
	r.check(logs, o)
	kinds := map[string]int{}
	for _, v := range r.viol {
		kinds[v.kind]++
	}
	if kinds["order"] != 1 || kinds["lost"] != 1 || kinds["failstop"] != 1 || o.duplicates != 1 || o.lost != 1 || o.dropped != 1 {
		t.Fatalf("checker found %v, duplicates=%d lost=%d dropped=%d; want one order, one lost, one failstop violation, 1 duplicate, 1 dropped", kinds, o.duplicates, o.lost, o.dropped)
	}
}
