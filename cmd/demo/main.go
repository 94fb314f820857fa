// Command demo shows what franz-go-ordered is for, in one command (make
// demo): it runs one keyed workload, with one schedule of broker failures,
// three ways against an in-process kfake cluster, and prints what each way
// wrote.
//
//   - upstream-style: kgo as upstream ships it (FailPartitionOnProduceFailure
//     off); the application produces a record again when its promise
//     reports an error.
//   - fail-stop + manual: kgo.FailPartitionOnProduceFailure, with the
//     application running the recovery protocol by hand.
//   - korder: a korder.Producer with Retry, Isolate and DeadLetter.
//
// Each way gets a fresh cluster, the same records in the same order, and the
// same failures: three poison records the broker always refuses
// (INVALID_RECORD for their whole batch) and three outages that refuse a
// batch with NOT_ENOUGH_REPLICAS until kgo's RecordRetries run out. The logs
// are then read back from the start with a separate client and checked.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cfg := defaultConfig()
	start := time.Now()
	results, err := run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		os.Exit(1)
	}
	printTable(os.Stdout, cfg, results)
	fmt.Fprintf(os.Stdout, "\n(%d records, %d keys, %d partitions; ran in %.1fs)\n", cfg.records, cfg.keys, cfg.partitions, time.Since(start).Seconds())
	fmt.Fprint(os.Stdout, `
Where to look next:
  cmd/demo/modes.go   the three modes; "fail-stop + manual" is the recovery protocol by hand
  pkg/korder          the Producer that runs that protocol for you (go doc ./pkg/korder)
  README.md           the guarantee, and using the fork and korder from your module (make export)
`)
}

// run runs every mode in turn, each on a fresh cluster, and returns a row
// per mode. A progress line goes to progress (nil: none).
func run(ctx context.Context, cfg config, progress io.Writer) ([]result, error) {
	w := newWorkload(cfg)
	var out []result
	for i, m := range modes {
		res, err := runMode(ctx, w, m, func(t *tracker) func() {
			return startProgress(progress, fmt.Sprintf("[%d/%d] %s", i+1, len(modes), m.name), cfg.records, t)
		})
		if err != nil {
			return out, fmt.Errorf("%s: %w", m.name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

func runMode(ctx context.Context, w *workload, m mode, progress func(*tracker) func()) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.modeTimeout)
	defer cancel()
	c, err := newCluster(w.cfg)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	t := newTracker(w)
	stop := progress(t)
	err = runBounded(ctx, func() error { return m.run(ctx, w, c, t) })
	stop()
	if err != nil {
		return result{}, err
	}
	recs, err := t.snapshot()
	if err != nil {
		return result{}, err
	}
	logs, dlq, err := readBack(ctx, c, w.cfg.partitions)
	if err != nil {
		return result{}, err
	}
	res, err := evaluate(w, recs, logs, dlq)
	res.mode = m.name
	return res, err
}

// runBounded runs fn, but returns once ctx is done and fn has had a few
// seconds more to return: a hang is reported, not waited out.
func runBounded(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return err
	case <-time.After(5 * time.Second):
		return fmt.Errorf("did not finish in time, and did not stop after its context ended: %w", ctx.Err())
	}
}

// startProgress reports progress on w until the returned function is
// called. On a terminal it rewrites one status line (with a carriage
// return, blanked at the end); otherwise (a log, a pipe) it writes a line
// when the mode starts, one a second, and one when it ends.
func startProgress(w io.Writer, label string, total int, t *tracker) func() {
	if w == nil {
		return func() {}
	}
	tty := isTerminal(w)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	last := 0
	line := func(s string) {
		if tty {
			fmt.Fprintf(w, "\r%-*s", last, s)
			last = len(s)
			return
		}
		fmt.Fprintln(w, s)
	}
	status := func() string {
		return fmt.Sprintf("demo %s: produced %d/%d, settled %d, failed attempts %d (a record can fail more than once)",
			label, t.produced.Load(), total, t.nSettled.Load(), t.kgoFailures.Load())
	}
	every := 100 * time.Millisecond
	if !tty {
		every = time.Second
	}
	wg.Go(func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			line(status())
			select {
			case <-tk.C:
			case <-quit:
				return
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		if tty {
			line("")
			fmt.Fprint(w, "\r")
			return
		}
		line(status() + ", done")
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

type column struct {
	head   string // the name in the legend; the table splits it over two lines at "|"
	value  func(result) int
	legend string
}

var columns = []column{
	{"produced", func(r result) int { return r.produced }, "records produced: the same ones, in the same order, in every mode"},
	{"failed", func(r result) int { return r.failed }, "records kgo failed at least once (failed batch, or rejected by a failed partition)"},
	{"written after|failure*", func(r result) int { return r.writtenAfterFailure }, "written while an earlier failed record of their partition was unsettled (*)"},
	{"out-of-order|keys", func(r result) int { return r.outOfOrderKeys }, "keys whose sequence numbers go backwards in the topic, read back from the start"},
	{"lost", func(r result) int { return r.lost }, "records in no topic, and the application was never told"},
	{"given|up", func(r result) int { return r.givenUp }, "records in no topic; the application gave up on them, and knows it"},
	{"dead-|lettered", func(r result) int { return r.deadLettered }, "records diverted to the dead-letter topic " + dlqTopic + ", the cause in a header"},
}

// legendName is a column's name on one line.
func legendName(head string) string {
	top, bottom, split := strings.Cut(head, "|")
	switch {
	case !split:
		return head
	case strings.HasSuffix(top, "-"):
		return top + bottom
	}
	return top + " " + bottom
}

// modeLegend describes a mode, wrapped to the table's width.
func modeLegend(cfg config, name string) []string {
	switch name {
	case "upstream-style":
		return []string{
			"kgo as upstream ships it (the option off): a failed record's promise produces",
			fmt.Sprintf("it again, up to %d attempts %s apart, while new records keep flowing", cfg.attempts, cfg.backoff),
		}
	case "fail-stop + manual":
		return []string{
			"kgo.FailPartitionOnProduceFailure, recovered by hand: promises collect the failed and",
			"rejected records; RecoverProducePartition with them in order, again while it answers",
			fmt.Sprintf("ErrRecoveryPending; on a repeat, one at a time (up to %d attempts %s apart)", cfg.attempts, cfg.backoff),
		}
	case "korder":
		return []string{fmt.Sprintf("korder.NewProducer with Retry(%d, %s), Isolate(), DeadLetter(%q)", cfg.attempts-1, cfg.backoff, dlqTopic)}
	}
	return nil
}

func printTable(w io.Writer, cfg config, results []result) {
	modeWidth := len("mode")
	for _, r := range results {
		modeWidth = max(modeWidth, len(r.mode))
	}
	var b strings.Builder
	heads := make([][2]string, len(columns))
	widths := make([]int, len(columns))
	for i, c := range columns {
		top, bottom, split := strings.Cut(c.head, "|")
		if !split {
			top, bottom = "", c.head
		}
		heads[i] = [2]string{top, bottom}
		widths[i] = max(len(top), len(bottom))
	}
	for line := range 2 {
		name := ""
		if line == 1 {
			name = "mode"
		}
		row := fmt.Sprintf("%-*s", modeWidth, name)
		for i := range columns {
			row += fmt.Sprintf("  %*s", widths[i], heads[i][line])
		}
		b.WriteString(strings.TrimRight(row, " ") + "\n")
	}
	b.WriteString(strings.Repeat("-", modeWidth))
	for i := range columns {
		b.WriteString("  " + strings.Repeat("-", widths[i]))
	}
	b.WriteString("\n")
	for _, r := range results {
		fmt.Fprintf(&b, "%-*s", modeWidth, r.mode)
		for i, c := range columns {
			fmt.Fprintf(&b, "  %*d", widths[i], c.value(r))
		}
		b.WriteString("\n")
	}

	var split []string
	for _, r := range results {
		split = append(split, fmt.Sprintf("%s %d", r.mode, r.failedRejectedOnly))
	}
	fmt.Fprintf(&b, `
Counts vary from run to run: the poison and outage records are the same in
every run, but which records share a batch with them, and how long a failed
partition takes to recover, depend on timing (and the machine's load).
"failed" counts each record once, however often it failed. Of those, the ones
only ever rejected by a failed partition, never in a failed batch:
%s.
The two modes with the option count more failed records than upstream-style
because of these: a record produced to a partition while it is failed is
rejected by kgo, then produced again, in order, once the partition is
recovered. How many depends on how long each recovery takes, in either mode.
`, strings.Join(split, ", "))

	b.WriteString("\nModes:\n")
	for _, r := range results {
		for i, l := range modeLegend(cfg, r.mode) {
			name := r.mode
			if i > 0 {
				name = ""
			}
			fmt.Fprintf(&b, "  %-*s  %s\n", modeWidth, name, l)
		}
	}
	b.WriteString("\nColumns:\n")
	headWidth := 0
	for _, c := range columns {
		headWidth = max(headWidth, len(c.head))
	}
	for _, c := range columns {
		fmt.Fprintf(&b, "  %-*s  %s\n", headWidth, legendName(c.head), c.legend)
	}
	b.WriteString(`
* Record Y of a partition counts when a record X of the same partition, produced
  before Y, had failed and Y was written before X was settled: X is after Y in
  the log, or X never reached the topic and was settled (given up on, or
  dead-lettered) only after kgo acknowledged Y. Y overtook X: the race this
  project closes. Each record counts once.
`)
	fmt.Fprintf(&b, "\nInjected in every mode: %d poison records (INVALID_RECORD for any batch holding one) and\n"+
		"%d outages (NOT_ENOUGH_REPLICAS for one batch %d times, so kgo's RecordRetries(%d) run out).\n",
		len(cfg.poison), len(cfg.outages), cfg.outageRefusals, cfg.recordRetries)
	notes := false
	for _, r := range results {
		if (r.givenUpCollateral > 0 || r.duplicates > 0) && !notes {
			b.WriteString("\n")
			notes = true
		}
		if r.givenUpCollateral > 0 {
			fmt.Fprintf(&b, "%s gave up on %d records that were not poison: every attempt failed with\n"+
				"INVALID_RECORD, because a poison record of their partition failed with them each time.\n", r.mode, r.givenUpCollateral)
		}
		if r.duplicates > 0 {
			fmt.Fprintf(&b, "%s wrote %d duplicate copies (counted once above).\n", r.mode, r.duplicates)
		}
	}
	for _, r := range results {
		if r.outOfOrderSample != "" {
			fmt.Fprintf(&b, "\nAn out-of-order key, %s:\n  %s\n  (seq is the key's produce order: the later record overtook a failed one).\n", r.mode, r.outOfOrderSample)
			break
		}
	}
	io.WriteString(w, b.String())
}
