// Command suitereport reads `go test -json` output and judges it against a
// baseline of failures that pristine upstream already has.
//
// It prints the counts of top-level tests run, passed, failed and skipped,
// and the elapsed time. It exits 1 if a test fails that is not in the
// baseline, or if a package fails without a failing test (a build error, a
// panic or a timeout). A baseline entry that passes is reported, so that the
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
	flag.Parse()
	if *suite == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: suitereport -suite NAME [-baseline FILE] TEST.json")
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
	r, err := judge(f, *suite, baseline)
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

func judge(r io.Reader, suite string, baseline map[string]string) (result, error) {
	var (
		status    = make(map[string]string) // top-level test => pass, fail, skip
		subtests  int
		pkgFailed = make(map[string]bool)
		pkgTests  = make(map[string]int) // failing tests per package
		pkgOutput = make(map[string][]string)
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
			out := pkgOutput[e.Package]
			if len(out) > 40 {
				out = out[1:]
			}
			pkgOutput[e.Package] = append(out, e.Output)
		case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
			if strings.Contains(e.Test, "/") {
				subtests++
				continue
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
	var newFails, fixed, knownFails []string
	for name, st := range status {
		switch st {
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
	for name := range baseline {
		if _, ran := status[name]; !ran {
			fmt.Fprintf(&b, "%s: NOTE baseline entry %s did not run\n", suite, name)
		}
	}
	if len(status) == 0 {
		ok = false
		fmt.Fprintf(&b, "%s: FAIL no tests ran\n", suite)
	}
	return result{ok: ok, text: b.String()}, nil
}
