package main

import (
	"encoding/json"
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

func TestJudge(t *testing.T) {
	for _, test := range []struct {
		name     string
		input    string
		baseline map[string]string
		run      string
		ok       bool
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
			r, err := judge(strings.NewReader(test.input), "s", baseline, test.run)
			if err != nil {
				t.Fatal(err)
			}
			if r.ok != test.ok {
				t.Errorf("ok? %v, exp ok? %v; report:\n%s", r.ok, test.ok, r.text)
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
