// Command suitereport reads `go test -json` output and judges it against a
// baseline of failures that pristine upstream already has.
//
// It prints the counts of top-level tests run, passed, failed and skipped,
// and the elapsed time. It exits 1 if a test fails that is not in the
// baseline, if a test never finishes (the binary timed out or panicked
// while it ran: its last output is printed, where go test puts the panic),
// or if a package fails without a failing test (a build error, say). A baseline entry that passes is reported, so that the
// baseline can shrink, but does not fail the run.
//
// The baseline file has one entry per line, "<suite> <TestName>", followed by
// an optional "# reason"; blank lines and comment lines are ignored.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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
	flag.Parse()
	if *suite == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: suitereport -suite NAME [-baseline FILE] [-run PATTERN] TEST.json")
		os.Exit(2)
	}
	baseline, err := readBaseline(*baselinePath, *suite)
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
	r, err := judge(f, *suite, baseline, *runPattern)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitereport:", err)
		os.Exit(2)
	}
	fmt.Print(r.text)
	if !r.ok {
		os.Exit(1)
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

type result struct {
	ok   bool
	text string
}

func judge(r io.Reader, suite string, baseline map[string]string, runPattern string) (result, error) {
	var (
		status    = make(map[string]string) // top-level test => pass, fail, skip
		subtests  int
		pkgFailed = make(map[string]bool)
		pkgTests  = make(map[string]int) // failing tests per package
		pkgOutput = make(map[string][]string)
		output    = make(map[string][]string) // top-level test => its last lines, subtests' included
		panics    = make(map[string][]string) // top-level test => its output from a "panic: " line on
		elapsed   float64
	)
	tail := func(lines []string, l string) []string {
		if len(lines) >= 40 {
			lines = lines[1:]
		}
		return append(lines, l)
	}
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
			pkgOutput[e.Package] = tail(pkgOutput[e.Package], e.Output)
		case e.Action == "output":
			top, _, _ := strings.Cut(e.Test, "/")
			output[top] = tail(output[top], e.Output)
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
	var newFails, fixed, knownFails, unfinished []string
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
			} else {
				newFails = append(newFails, name)
			}
		}
	}
	slices.Sort(newFails)
	slices.Sort(fixed)
	slices.Sort(knownFails)
	slices.Sort(unfinished)

	var b strings.Builder
	ok := true
	fmt.Fprintf(&b, "%s: run=%d passed=%d failed=%d skipped=%d subtests=%d time=%s\n",
		suite, len(status), passed, failed, skipped, subtests,
		(time.Duration(elapsed * float64(time.Second))).Round(time.Second))
	for _, name := range knownFails {
		fmt.Fprintf(&b, "%s: known baseline failure %s (%s)\n", suite, name, baseline[name])
	}
	for _, name := range newFails {
		ok = false
		fmt.Fprintf(&b, "%s: FAIL %s is not in the baseline\n", suite, name)
	}
	for _, name := range unfinished {
		ok = false
		if p := panics[name]; p != nil {
			fmt.Fprintf(&b, "%s: FAIL %s did not finish: the test binary panicked while it ran; the panic, and the goroutines in test code:\n", suite, name)
			for _, l := range testGoroutines(p, 200) {
				fmt.Fprintf(&b, "    %s", l)
			}
			continue
		}
		fmt.Fprintf(&b, "%s: FAIL %s did not finish (the test binary died while it ran); its last output:\n", suite, name)
		for _, l := range output[name] {
			fmt.Fprintf(&b, "    %s", l)
		}
	}
	for pkg := range pkgFailed {
		if pkgTests[pkg] == 0 {
			ok = false
			fmt.Fprintf(&b, "%s: FAIL package %s failed without a failing test (build error, panic or timeout); last output:\n", suite, pkg)
			for _, l := range pkgOutput[pkg] {
				fmt.Fprintf(&b, "    %s", l)
			}
		}
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
		fmt.Fprintf(&b, "%s: NOTE baseline entry %s did not run: %s\n", suite, name, whyNotRun(name, runPattern))
	}
	if len(status) == 0 {
		ok = false
		fmt.Fprintf(&b, "%s: FAIL no tests ran\n", suite)
	}
	return result{ok: ok, text: b.String()}, nil
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
