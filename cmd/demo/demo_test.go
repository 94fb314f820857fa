package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the demo's three modes and checks the claims its table
// makes: fail-stop and korder keep every key in order and lose nothing, and
// the upstream-style baseline does reorder keys (which shows the checker
// finds reordering when there is some).
func TestDemo(t *testing.T) {
	d := 40 * time.Second
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)-5*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	cfg := defaultConfig()
	results, err := run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	printTable(&table, cfg, results)
	t.Logf("\n%s", table.String())

	rows := make(map[string]result)
	for _, r := range results {
		rows[r.mode] = r
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for name, r := range rows {
		if r.produced != cfg.records {
			t.Errorf("%s: produced %d, want %d", name, r.produced, cfg.records)
		}
		if r.failed == 0 {
			t.Errorf("%s: no record failed: the faults were not injected", name)
		}
		if r.failedRejectedOnly > r.failed {
			t.Errorf("%s: %d records only rejected, of %d failed", name, r.failedRejectedOnly, r.failed)
		}
	}

	up := rows["upstream-style"]
	if up.outOfOrderKeys == 0 {
		t.Errorf("upstream-style: no out-of-order key: the baseline must show the reordering the other modes prevent")
	}
	if up.failedRejectedOnly != 0 {
		t.Errorf("upstream-style: %d records rejected by a failed partition, with the option off", up.failedRejectedOnly)
	}
	if up.writtenAfterFailure == 0 {
		t.Errorf("upstream-style: no record written after a failure")
	}
	for _, name := range []string{"fail-stop + manual", "korder"} {
		r := rows[name]
		if r.outOfOrderKeys != 0 || r.lost != 0 || r.writtenAfterFailure != 0 || r.duplicates != 0 {
			t.Errorf("%s: %d out-of-order keys, %d lost, %d written after a failure, %d duplicates; want 0 of each",
				name, r.outOfOrderKeys, r.lost, r.writtenAfterFailure, r.duplicates)
		}
	}
	if k := rows["korder"]; k.deadLettered != len(cfg.poison) || k.givenUp != 0 {
		t.Errorf("korder: %d dead-lettered, %d given up; want the %d poison records dead-lettered", k.deadLettered, k.givenUp, len(cfg.poison))
	}
	if fs := rows["fail-stop + manual"]; fs.givenUp != len(cfg.poison) {
		t.Errorf("fail-stop + manual: %d given up, want the %d poison records", fs.givenUp, len(cfg.poison))
	}
	if !strings.Contains(table.String(), "Counts vary from run to run") {
		t.Errorf("the table does not say that its counts vary:\n%s", table.String())
	}
	if !strings.Contains(table.String(), "out-of-order keys") {
		t.Errorf("the table has no out-of-order column:\n%s", table.String())
	}
}
