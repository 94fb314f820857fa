package main

import (
	"strings"
	"testing"
)

func ev(action, test string) string {
	return `{"Action":"` + action + `","Package":"p","Test":"` + test + `"}` + "\n"
}

func TestJudge(t *testing.T) {
	for _, test := range []struct {
		name     string
		input    string
		baseline map[string]string
		ok       bool
		contains []string
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
			contains: []string{"NOTE baseline entry TestA now passes", "NOTE baseline entry TestGone did not run"},
		},
		{
			name:     "panic without failing test",
			input:    ev("pass", "TestA") + `{"Action":"output","Package":"p","Output":"panic: boom\n"}` + "\n" + `{"Action":"fail","Package":"p"}` + "\n",
			ok:       false,
			contains: []string{"failed without a failing test", "panic: boom"},
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
			r, err := judge(strings.NewReader(test.input), "s", baseline)
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
		})
	}
}
