package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func ev(action, test string) string {
	return `{"Action":"` + action + `","Package":"p","Test":"` + test + `"}` + "\n"
}

// out is test's output events, one per line.
func out(test string, lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		e, _ := json.Marshal(event{Action: "output", Package: "p", Test: test, Output: l})
		b.Write(e)
		b.WriteString("\n")
	}
	return b.String()
}

// lines returns n output lines "prefix i".
func lines(prefix string, n int) []string {
	var ls []string
	for i := range n {
		ls = append(ls, fmt.Sprintf("%s %d\n", prefix, i))
	}
	return ls
}

func TestJudge(t *testing.T) {
	for _, test := range []struct {
		name     string
		input    string
		baseline map[string]string
		flaky    map[string]string
		again    bool
		run      string
		ok       bool
		rerun    []string
		contains []string
		excludes []string
	}{
		{
			name:     "all pass",
			input:    ev("pass", "TestA") + ev("skip", "TestB") + ev("pass", "TestA/sub") + `{"Action":"pass","Package":"p","Elapsed":2}` + "\n",
			ok:       true,
			contains: []string{"run=2 passed=1 failed=0 skipped=1 subtests=1 time=2s"},
		},
		{
			name:     "new failure",
			input:    ev("fail", "TestA") + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"FAIL TestA is not in the baseline"},
		},
		{
			name:     "known failure",
			input:    ev("fail", "TestA") + ev("pass", "TestB") + `{"Action":"fail","Package":"p"}` + "\n",
			baseline: map[string]string{"TestA": "flaky upstream"},
			ok:       true,
			contains: []string{"known baseline failure TestA (flaky upstream)"},
		},
		{
			name:     "baseline entry fixed",
			input:    ev("pass", "TestA"),
			baseline: map[string]string{"TestA": "x", "TestGone": "y"},
			ok:       true,
			contains: []string{"NOTE baseline entry TestA now passes", "NOTE baseline entry TestGone did not run: this run selects it, but no such test ran"},
		},
		{
			name:     "baseline entry not selected by -run",
			input:    ev("pass", "TestA"),
			baseline: map[string]string{"TestGone": "y"},
			run:      "A|B",
			ok:       true,
			contains: []string{`NOTE baseline entry TestGone did not run: this run's -run "A|B" does not select it, so it was not checked (expected)`},
		},
		{
			name:     "panic without failing test",
			input:    ev("pass", "TestA") + `{"Action":"output","Package":"p","Output":"panic: boom\n"}` + "\n" + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"failed without a failing test", "panic: boom"},
		},
		{
			name: "timeout while a test runs",
			input: ev("run", "TestA") + ev("pass", "TestA") + ev("run", "TestB") + ev("run", "TestB/sub") +
				`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"panic: test timed out after 15m0s\n"}` + "\n" +
				`{"Action":"output","Package":"p","Output":"FAIL\tp\t900s\n"}` + "\n" + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"run=2 passed=1 failed=1", "FAIL TestB did not finish", "panic: test timed out after 15m0s"},
		},
		{
			name: "the goroutines of a timeout that are in tests",
			input: ev("run", "TestB") + out("TestB", "panic: test timed out after 15m0s\n", "\trunning tests:\n", "\t\tTestB (15m0s)\n", "\n",
				"goroutine 5 [running]:\n", "testing.(*M).startAlarm.func1()\n", "\n",
				"goroutine 7 [chan receive]:\n", "kgo.TestB(0x1)\n", "\t/x/kgo/b_test.go:42 +0x1\n", "\n") +
				`{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"TestB (15m0s)", "b_test.go:42"},
			excludes: []string{"startAlarm"},
		},
		{
			name:     "a failing test prints its last 60 lines",
			input:    ev("run", "TestA") + out("TestA", lines("a", 70)...) + out("TestA/sub", "sub says why\n") + ev("fail", "TestA/sub") + ev("fail", "TestA") + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"FAIL TestA is not in the baseline\n    its last 60 lines of output (of 71):\n        a 11\n", "        a 69\n        sub says why\n"},
			excludes: []string{"a 10\n"},
		},
		{
			name: "a failing test's messages are printed even when its log buries them",
			input: ev("run", "TestA") + out("TestA", "    a_test.go:12: first\n") + out("TestA", lines("log", 70)...) +
				out("TestA", "    a_test.go:30: the failure\n") + out("TestA", lines("late log", 5)...) + ev("fail", "TestA") + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"FAIL TestA is not in the baseline\n    its messages (file:line):\n        a_test.go:12: first\n        a_test.go:30: the failure\n    its last 60 lines"},
		},
		{
			name:     "a known flaky test that fails is run again",
			input:    ev("fail", "TestA") + out("TestA", "timing\n") + ev("pass", "TestB") + `{"Action":"fail","Package":"p"}` + "\n",
			flaky:    map[string]string{"TestA": "200 ms timeout"},
			ok:       true,
			rerun:    []string{"TestA"},
			contains: []string{"FAIL TestA, a known flaky test (200 ms timeout): it runs once more, alone, and must pass then\n    its output:\n        timing\n"},
		},
		{
			name:     "a known flaky test is not run again beside another failure",
			input:    ev("fail", "TestA") + ev("fail", "TestC") + `{"Action":"fail","Package":"p"}` + "\n",
			flaky:    map[string]string{"TestA": "200 ms timeout"},
			ok:       false,
			contains: []string{"FAIL TestC is not in the baseline", "FAIL TestA, a known flaky test (200 ms timeout): not run again"},
		},
		{
			name:     "a known flaky test that fails on its second run fails",
			input:    ev("fail", "TestA") + `{"Action":"fail","Package":"p"}` + "\n",
			flaky:    map[string]string{"TestA": "200 ms timeout"},
			again:    true,
			ok:       false,
			contains: []string{"FAIL TestA, a known flaky test (200 ms timeout): it failed again, run alone"},
		},
		{
			name:     "nothing ran",
			input:    "",
			ok:       false,
			contains: []string{"no tests ran"},
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			baseline := test.baseline
			if baseline == nil {
				baseline = map[string]string{}
			}
			r, err := judge(strings.NewReader(test.input), judgeConfig{suite: "s", baseline: baseline, flaky: test.flaky, again: test.again, runPattern: test.run})
			if err != nil {
				t.Fatal(err)
			}
			if r.ok != test.ok {
				t.Errorf("ok? %v, exp ok? %v; report:\n%s", r.ok, test.ok, r.text)
			}
			if !slices.Equal(r.rerun, test.rerun) {
				t.Errorf("rerun %v, exp %v", r.rerun, test.rerun)
			}
			for _, c := range test.contains {
				if !strings.Contains(r.text, c) {
					t.Errorf("report does not contain %q:\n%s", c, r.text)
				}
			}
			for _, c := range test.excludes {
				if strings.Contains(r.text, c) {
					t.Errorf("report contains %q:\n%s", c, r.text)
				}
			}
		})
	}
}

// TestJudgeKeepsLogs: with a log directory, each failing test's whole output
// is written there, and the report names the file.
func TestJudgeKeepsLogs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	input := ev("run", "TestA") + out("TestA", lines("a", 100)...) + ev("fail", "TestA") + ev("pass", "TestB") + `{"Action":"fail","Package":"p"}` + "\n"
	r, err := judge(strings.NewReader(input), judgeConfig{suite: "s", logDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s-TestA.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; report:\n%s", err, r.text)
	}
	if exp := strings.Join(lines("a", 100), ""); string(b) != exp {
		t.Errorf("log holds %q, exp %q", b, exp)
	}
	for _, c := range []string{"    full log: " + path + "\n", "s: full output of the 1 failing test(s) kept in " + dir} {
		if !strings.Contains(r.text, c) {
			t.Errorf("report does not contain %q:\n%s", c, r.text)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s-TestB.log")); err == nil {
		t.Error("a passing test's log was written")
	}
}

func TestMessages(t *testing.T) {
	var in []string
	for i := range 25 {
		in = append(in, fmt.Sprintf("    x_test.go:%d: m\n", i), "    [INFO] a log line\n")
	}
	got := messages(in, 20)
	if len(got) != 21 || got[0] != "[... 5 earlier]\n" || got[1] != "x_test.go:5: m\n" || got[20] != "x_test.go:24: m\n" {
		t.Errorf("messages: %q", got)
	}
}
