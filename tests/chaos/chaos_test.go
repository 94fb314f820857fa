// Package chaos_test is a seeded chaos harness for FailPartitionOnProduceFailure
// and pkg/korder.
//
// A run (runChaos) starts a kfake cluster and one producing client from a
// runConfig derived from a seed. seed % numConfigs picks the configuration:
// the producer kind (idempotent; non-idempotent with 1 request in flight;
// transactional, with BeginTransaction/EndTransaction every 20-120ms) times
// the client side (raw kgo with the option and the test-side recovery
// protocol, or korder with one of five policy sets). The rest of the seed
// draws 1-3 brokers, 1-64 partitions, 1-8 producer goroutines producing keyed
// records (ManualPartitioner, key -> partition) whose value carries (record
// id, producer, key, per-key sequence, per-partition sequence), a codec,
// linger, RecordRetries, sometimes RecordDeliveryTimeout, short request
// timeouts, or a small MaxBufferedRecords (raw kgo and the baseline then
// produce with TryProduce: ErrMaxBuffered fails the whole topic). A
// ticker-driven scheduler draws a fault per tick from the seed (or the
// fuzzer's bytes): non-retryable broker errors for N requests
// (INVALID_RECORD, MESSAGE_TOO_LARGE, CORRUPT_MESSAGE, POLICY_VIOLATION,
// TOPIC_AUTHORIZATION_FAILED), NOT_ENOUGH_REPLICAS for a while (RecordRetries
// or the delivery timeout run out), held responses, dropped connections,
// leader moves, a broker removed (its connections closed) and added back,
// a record too large for a batch, canceled record contexts. After the
// producing phase the faults are removed, every record is driven to success
// (in a transaction: committed) or to "dropped and reported", Flush and
// Close must return, and a separate consumer (read-committed, for
// transactions) reads every partition and the dead-letter topic back for
// the checker (check_test.go): per-stream order of first copies, no loss,
// acknowledged offsets, nothing of an aborted transaction visible, promises
// called exactly once, dead-lettered records in the dead-letter topic, the
// fail-stop guarantee itself (no record handed to kgo after a failed one is
// written before the next recovery), a transaction in which a partition
// failed never commits, and no goroutine leak.
//
// modeFailStop runs raw kgo with the option and the recovery protocol of
// harness_test.go (in a transaction: abort, and produce the whole
// transaction again in order); modeKorder runs korder, which recovers by
// itself; modeNaive runs the option off and re-produces failures from their
// promise: the baseline, which must show violations (also on pristine
// v1.22.3, built with -tags pristine, see tests/chaos.sh).
package chaos_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
	extra := ""
	if o.rc.txn() {
		extra += fmt.Sprintf(" commits=%d aborts=%d", o.commits, o.aborts)
	}
	if o.korder != "" {
		extra += " " + o.korder
	}
	return fmt.Sprintf("%-8s %-44s seed=%-6d recs=%-5d written=%-5d dup=%-3d dropped=%-3d lost=%d unfinished=%d failed=%-4d rejected=%-4d hooks=%-3d recoveries=%-3d documented=%d violations=%d faults=%d%s %v | %v",
		o.rc.mode, o.rc.name(), o.rc.seed, o.records, o.written, o.duplicates, o.dropped, o.lost, o.unfinished, o.hardFails, o.rejected, o.hooks, o.recoveries, o.documented, len(o.viol), len(o.faults), extra, o.elapsed.Truncate(time.Millisecond), o.rc)
}

// shortSeeds: seed % numConfigs is the configuration, so these cover each
// configuration twice; between them they draw 1-3 brokers, every codec,
// MaxBufferedRecords pressure, and every fault kind (see TestChaosShort's log
// with -v, and CHAOS_SEED=n with TestChaosSeed for a run's fault schedule).
var shortSeeds = func() []uint64 {
	var s []uint64
	for i := range 2 * numConfigs {
		s = append(s, uint64(numConfigs+i))
	}
	return s
}()

// TestChaosShort runs a few fixed seeds with the option on, one per
// configuration (raw kgo and the recovery protocol, korder with each policy
// set; idempotent, non-idempotent and transactional), each with 400ms of
// producing under faults; any violation fails.
func TestChaosShort(t *testing.T) {
	if !failStopAvailable {
		t.Skip("pristine franz-go: FailPartitionOnProduceFailure is not compiled in")
	}
	for _, seed := range shortSeeds {
		o := runChaos(newConfig(seed, false, false), nil)
		t.Log(o.line())
		if len(o.viol) > 0 {
			t.Error(o.report(o.hist, outDir(t)))
		}
	}
}

// TestChaosSeed reproduces one run: CHAOS_SEED, CHAOS_MODE=naive for the
// baseline (option off, naive recovery) instead of the seed's client side,
// CHAOS_LONG=1 for the long producing phase of TestChaos, CHAOS_KEEP=1 to
// write the history even without a violation (to CHAOS_OUT).
func TestChaosSeed(t *testing.T) {
	s := os.Getenv("CHAOS_SEED")
	if s == "" {
		t.Skip("set CHAOS_SEED")
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	baseline := os.Getenv("CHAOS_MODE") == "naive" || !failStopAvailable
	o := runChaos(newConfig(seed, baseline, os.Getenv("CHAOS_LONG") == "1"), nil)
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

func (tt totals) String() string {
	return fmt.Sprintf("runs=%d violations=%d lost=%d duplicates=%d unfinished_promises=%d", tt.runs, tt.violations, tt.lost, tt.duplicates, tt.unfinished)
}

// TestChaos loops over seeds for CHAOS_SECONDS (from CHAOS_SEED, default
// 1000; seed % numConfigs is the configuration, so consecutive seeds rotate
// through them): each seed runs its configuration with the option on (raw
// kgo and the protocol, or korder; patched tree only), then the baseline
// (option off, naive recovery) with the same configuration and fault
// schedule. It prints one line per run, one line per configuration and the
// summary line; violations with the option on fail the test.
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
	perFS := make([]totals, numConfigs)
	perNaive := make([]totals, numConfigs)
	kinds := strings.Fields(os.Getenv("CHAOS_KINDS")) // empty: every kind
	for seed := base; time.Now().Before(deadline); seed++ {
		if name := configName(int(seed % uint64(numConfigs))); len(kinds) > 0 && !slices.Contains(kinds, name[:strings.Index(name, "/")]) {
			continue
		}
		if failStopAvailable {
			o := runChaos(newConfig(seed, false, true), nil)
			fs.add(o)
			perFS[o.rc.config].add(o)
			fmt.Println("chaos run: " + o.line())
			if len(o.viol) > 0 {
				fmt.Print(o.report(o.hist, dir))
				t.Fail()
			} else if o.duplicates > 0 && o.rc.idempotent() {
				// Not documented, not yet explained (see README): keep
				// the history under CHAOS_OUT for study.
				o.report(o.hist, dir)
				fmt.Printf("  idempotent duplicates kept for study: seed %d, %d copies\n", o.rc.seed, o.duplicates)
			}
		}
		b := runChaos(newConfig(seed, true, true), nil)
		naive.add(b)
		perNaive[b.rc.config].add(b)
		fmt.Println("chaos run: " + b.line())
		if len(b.viol) > 0 {
			// The baseline is expected to violate: keep its
			// history, print only the first lines.
			b.report(b.hist, dir)
			fmt.Printf("  baseline violation (expected): [%s] %s\n", b.viol[0].kind, b.viol[0].msg)
		}
	}
	for i := range numConfigs {
		if failStopAvailable {
			fmt.Printf("chaos config %-44s option on: %s | baseline: %s\n", configName(i), perFS[i], perNaive[i])
		} else {
			fmt.Printf("chaos config %-44s baseline: %s\n", configName(i), perNaive[i])
		}
	}
	fmt.Printf("chaos baseline: %s\n", naive)
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
	// Fault op = byte % 12: 3 broker error, 4 NOT_ENOUGH_REPLICAS, 5
	// delay, 6 dropped connection, 7 leader move, 8 cancel, 9 broker
	// removed and added back, 10 a record too large for a batch; the bytes
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
	r := &run{rc: runConfig{mode: modeFailStop, partitions: 1, kind: kindIdempotent}}
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
