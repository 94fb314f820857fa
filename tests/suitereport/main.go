// Command suitereport reads `go test -json` output and judges it against a
// baseline of failures that pristine upstream already has.
//
// It prints the counts of top-level tests run, passed, failed and skipped,
// and the elapsed time. It exits 1 if a test fails that is not in the
// baseline, if a test never finishes (the binary timed out or panicked
// while it ran: the panic is printed, where go test puts it), or if a
// package fails without a failing test (a build error, say). A baseline
// entry that passes is reported, so that the baseline can shrink, but does
// not fail the run.
//
// Every failure prints the last 60 lines of the test's output (its
// subtests' included), and, with -logdir, the path of a file holding all of
// it, written there.
//
// A test listed in the -flaky file (known to fail now and then on pristine
// upstream too) that fails is reported like any failure, output included,
// and written to the -rerun file; if every failure is such a test, the exit
// status is 3: the caller runs those tests once more, alone, and that run
// must pass (judged with -again). A flaky test is never skipped.
//
// Both files have one entry per line, "<suite> <TestName>", followed by an
// optional "# reason"; blank lines and comment lines are ignored.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	suite := flag.String("suite", "", "suite name, as used in the baseline file (e.g. kgo, kfake)")
	baselinePath := flag.String("baseline", "", "baseline file of known failures")
	runPattern := flag.String("run", "", "the go test -run pattern of the run (empty: every test), to say why a baseline entry did not run")
	flakyPath := flag.String("flaky", "", "file of known flaky tests: a failure of one is run once more (exit status 3)")
	rerunPath := flag.String("rerun", "", "with -flaky: where to write the names of the flaky tests that failed, one a line")
	again := flag.Bool("again", false, "with -flaky: this run is the second run of the flaky tests that failed, which must pass")
	logDir := flag.String("logdir", "", "directory to write each failing test's full output to (created if needed)")
	flag.Parse()
	if *suite == "" || flag.NArg() != 1 || (*flakyPath != "" && *rerunPath == "") {
		fmt.Fprintln(os.Stderr, "usage: suitereport -suite NAME [-baseline FILE] [-flaky FILE -rerun FILE] [-logdir DIR] [-run PATTERN] TEST.json")
		os.Exit(2)
	}
	baseline, err := readBaseline(*baselinePath, *suite)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitereport:", err)
		os.Exit(2)
	}
	flaky, err := readBaseline(*flakyPath, *suite)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitereport:", err)
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitereport:", err)
		os.Exit(2)
	}
	defer f.Close()
	r, err := judge(f, judgeConfig{suite: *suite, baseline: baseline, flaky: flaky, again: *again, runPattern: *runPattern, logDir: *logDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitereport:", err)
		os.Exit(2)
	}
	fmt.Print(r.text)
	if *rerunPath != "" {
		var b strings.Builder
		for _, name := range r.rerun {
			b.WriteString(name + "\n")
		}
		if err := os.WriteFile(*rerunPath, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "suitereport:", err)
			os.Exit(2)
		}
	}
	switch {
	case !r.ok:
		os.Exit(1)
	case len(r.rerun) > 0:
		os.Exit(3)
	}
}

func readBaseline(path, suite string) (map[string]string, error) {
	m := make(map[string]string)
	if path == "" {
		return m, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		body, reason, _ := strings.Cut(line, "#")
		fields := strings.Fields(body)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("baseline %s: bad line %q (want \"<suite> <TestName> # reason\")", path, line)
		}
		if fields[0] == suite {
			m[fields[1]] = strings.TrimSpace(reason)
		}
	}
	return m, nil
}

// tailLines is how many of a failing test's last output lines the report
// prints; maxMessages, how many of its messages (see messages) at most.
const (
	tailLines   = 60
	maxMessages = 20
)

// messageLine is a line that testing prints for t.Log, t.Error or t.Fatal
// in a test file ("    file_test.go:12: ..."), or for a panic's location.
var messageLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// messages returns a test's messages from its output: its t.Log, t.Error
// and t.Fatal lines, at most max of them, the last ones (a test stops at
// its first t.Fatal), after a line saying how many earlier ones there are.
func messages(lines []string, max int) []string {
	var out []string
	for _, l := range lines {
		if messageLine.MatchString(l) {
			out = append(out, strings.TrimLeft(l, " \t"))
		}
	}
	if len(out) > max {
		out = append([]string{fmt.Sprintf("[... %d earlier]\n", len(out)-max)}, out[len(out)-max:]...)
	}
	return out
}

type result struct {
	ok    bool
	text  string
	rerun []string // known flaky tests that failed: to run once more
}

type judgeConfig struct {
	suite      string
	baseline   map[string]string // known failures
	flaky      map[string]string // known flaky tests
	again      bool              // this run is the flaky tests' second run: they must pass
	runPattern string
	logDir     string // where to write failing tests' full output; "" for none
}

func judge(r io.Reader, cfg judgeConfig) (result, error) {
	var (
		suite     = cfg.suite
		baseline  = cfg.baseline
		status    = make(map[string]string) // top-level test => pass, fail, skip
		subtests  int
		pkgFailed = make(map[string]bool)
		pkgTests  = make(map[string]int) // failing tests per package
		pkgOutput = make(map[string][]string)
		output    = make(map[string][]string) // top-level test => its output, subtests' included
		panics    = make(map[string][]string) // top-level test => its output from a "panic: " line on
		elapsed   float64
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			continue
		}
		switch {
		case e.Test == "" && e.Action == "fail":
			pkgFailed[e.Package] = true
			elapsed += e.Elapsed
		case e.Test == "" && e.Action == "pass":
			elapsed += e.Elapsed
		case e.Test == "" && e.Action == "output":
			pkgOutput[e.Package] = append(pkgOutput[e.Package], e.Output)
		case e.Action == "output":
			top, _, _ := strings.Cut(e.Test, "/")
			output[top] = append(output[top], e.Output)
			if panics[top] != nil || strings.HasPrefix(e.Output, "panic: ") {
				panics[top] = append(panics[top], e.Output)
			}
		case e.Action == "run" && !strings.Contains(e.Test, "/"):
			// Until it ends: a test still "run" at the end of the
			// stream never finished (the binary timed out or
			// panicked while it ran).
			if _, ok := status[e.Test]; !ok {
				status[e.Test] = "run"
				pkgTests[e.Package]++
			}
		case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
			if strings.Contains(e.Test, "/") {
				subtests++
				continue
			}
			if status[e.Test] == "run" {
				pkgTests[e.Package]--
			}
			status[e.Test] = e.Action
			if e.Action == "fail" {
				pkgTests[e.Package]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return result{}, err
	}

	var passed, failed, skipped int
	var newFails, flakyFails, fixed, knownFails, unfinished []string
	for name, st := range status {
		switch st {
		case "run":
			failed++
			unfinished = append(unfinished, name)
		case "pass":
			passed++
			if _, ok := baseline[name]; ok {
				fixed = append(fixed, name)
			}
		case "skip":
			skipped++
		case "fail":
			failed++
			if _, ok := baseline[name]; ok {
				knownFails = append(knownFails, name)
			} else if _, ok := cfg.flaky[name]; ok {
				flakyFails = append(flakyFails, name)
			} else {
				newFails = append(newFails, name)
			}
		}
	}
	slices.Sort(newFails)
	slices.Sort(flakyFails)
	slices.Sort(fixed)
	slices.Sort(knownFails)
	slices.Sort(unfinished)
	var failedPkgs []string
	for pkg := range pkgFailed {
		if pkgTests[pkg] == 0 {
			failedPkgs = append(failedPkgs, pkg)
		}
	}
	slices.Sort(failedPkgs)
	ok := len(newFails) == 0 && len(unfinished) == 0 && len(failedPkgs) == 0 && len(status) > 0
	if cfg.again && len(flakyFails) > 0 {
		ok = false
	}

	var b strings.Builder
	var logs []string // the full logs written, for the closing line
	// keep writes name's full output to the log directory and returns
	// its path, or "" without a log directory.
	keep := func(name string, lines []string) string {
		if cfg.logDir == "" {
			return ""
		}
		path := filepath.Join(cfg.logDir, suite+"-"+strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(name)+".log")
		err := os.MkdirAll(cfg.logDir, 0o755)
		if err == nil {
			err = os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
		}
		if err != nil {
			return fmt.Sprintf("(not written: %v)", err)
		}
		logs = append(logs, path)
		return path
	}
	// logLine prints where a test's full output is.
	logLine := func(path string) {
		if path != "" {
			fmt.Fprintf(&b, "    full log: %s\n", path)
		}
	}
	// indent prints lines indented by 8 spaces.
	indent := func(lines []string) {
		for _, l := range lines {
			fmt.Fprintf(&b, "        %s", l)
			if !strings.HasSuffix(l, "\n") {
				b.WriteString("\n")
			}
		}
	}
	// show prints a failing test's own messages (its t.Error and t.Fatal
	// lines, which its log lines can bury), then its last lines.
	show := func(lines []string) {
		if msgs := messages(lines, maxMessages); len(msgs) > 0 {
			b.WriteString("    its messages (file:line):\n")
			indent(msgs)
		}
		if len(lines) > tailLines {
			fmt.Fprintf(&b, "    its last %d lines of output (of %d):\n", tailLines, len(lines))
			lines = lines[len(lines)-tailLines:]
		} else {
			b.WriteString("    its output:\n")
		}
		indent(lines)
	}
	fmt.Fprintf(&b, "%s: run=%d passed=%d failed=%d skipped=%d subtests=%d time=%s\n",
		suite, len(status), passed, failed, skipped, subtests,
		(time.Duration(elapsed * float64(time.Second))).Round(time.Second))
	for _, name := range knownFails {
		fmt.Fprintf(&b, "%s: known baseline failure %s (%s)\n", suite, name, baseline[name])
		logLine(keep(name, output[name]))
	}
	for _, name := range newFails {
		fmt.Fprintf(&b, "%s: FAIL %s is not in the baseline\n", suite, name)
		show(output[name])
		logLine(keep(name, output[name]))
	}
	for _, name := range flakyFails {
		then := "it runs once more, alone, and must pass then"
		switch {
		case cfg.again:
			then = "it failed again, run alone"
		case !ok:
			then = "not run again: this run fails for the failures above"
		}
		fmt.Fprintf(&b, "%s: FAIL %s, a known flaky test (%s): %s\n", suite, name, cfg.flaky[name], then)
		show(output[name])
		logLine(keep(name, output[name]))
	}
	for _, name := range unfinished {
		if p := panics[name]; p != nil {
			fmt.Fprintf(&b, "%s: FAIL %s did not finish: the test binary panicked while it ran; the panic, and the goroutines in test code:\n", suite, name)
			for _, l := range testGoroutines(p, 200) {
				fmt.Fprintf(&b, "    %s", l)
			}
		} else {
			fmt.Fprintf(&b, "%s: FAIL %s did not finish (the test binary died while it ran)\n", suite, name)
			show(output[name])
		}
		logLine(keep(name, output[name]))
	}
	for _, pkg := range failedPkgs {
		fmt.Fprintf(&b, "%s: FAIL package %s failed without a failing test (build error, panic or timeout)\n", suite, pkg)
		show(pkgOutput[pkg])
		logLine(keep("package-"+pkg, pkgOutput[pkg]))
	}
	for _, name := range fixed {
		fmt.Fprintf(&b, "%s: NOTE baseline entry %s now passes; remove it from the baseline\n", suite, name)
	}
	var notRun []string
	for name := range baseline {
		if _, ran := status[name]; !ran {
			notRun = append(notRun, name)
		}
	}
	slices.Sort(notRun)
	for _, name := range notRun {
		fmt.Fprintf(&b, "%s: NOTE baseline entry %s did not run: %s\n", suite, name, whyNotRun(name, cfg.runPattern))
	}
	if len(status) == 0 {
		fmt.Fprintf(&b, "%s: FAIL no tests ran\n", suite)
	}
	if len(logs) > 0 {
		fmt.Fprintf(&b, "%s: full output of the %d failing test(s) kept in %s\n", suite, len(logs), cfg.logDir)
	}
	var rerun []string
	if ok {
		rerun = flakyFails
	}
	return result{ok: ok, text: b.String(), rerun: rerun}, nil
}

// testGoroutines returns, from the output of a panic (a timeout's among
// them), its first block (the message, and the running tests for a
// timeout) and the goroutines whose stack has a frame in a _test.go file,
// which say where the tests were stuck: at most max lines.
func testGoroutines(lines []string, max int) []string {
	var out, block []string
	first := true
	flush := func() {
		keep := first
		for _, l := range block {
			keep = keep || strings.Contains(l, "_test.go:")
		}
		if keep && len(out) < max {
			out = append(out, block[:min(len(block), max-len(out))]...)
		}
		first, block = false, nil
	}
	for _, l := range lines {
		block = append(block, l)
		if strings.TrimSpace(l) == "" {
			flush()
		}
	}
	flush()
	return out
}

// whyNotRun says why a baseline entry did not run: the run's -run pattern
// did not select it (expected, nothing to do), or it did and the test is
// gone (renamed or removed upstream: the entry may be stale).
func whyNotRun(name, runPattern string) string {
	top, _, _ := strings.Cut(runPattern, "/")
	if top != "" {
		if re, err := regexp.Compile(top); err == nil && !re.MatchString(name) {
			return fmt.Sprintf("this run's -run %q does not select it, so it was not checked (expected)", runPattern)
		}
	}
	return "this run selects it, but no such test ran: renamed or removed upstream? check the baseline entry"
}
