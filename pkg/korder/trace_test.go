package korder_test

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// traceLogger keeps the client's last debug log lines, written out if the
// test fails: set KORDER_TRACE to a directory (for rare failures).
type traceLogger struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func (l *traceLogger) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *traceLogger) Log(level kgo.LogLevel, msg string, kvs ...any) {
	s := fmt.Sprintf("%s %s %s %v", time.Now().Format("15:04:05.000000"), level, msg, kvs)
	l.mu.Lock()
	if len(l.lines) < 50000 {
		l.lines = append(l.lines, s)
	} else {
		l.lines[l.next] = s
		l.next = (l.next + 1) % len(l.lines)
	}
	l.mu.Unlock()
}

func traceOpts(t *testing.T) []kgo.Opt {
	if os.Getenv("KORDER_TRACE") == "" {
		return nil
	}
	l := &traceLogger{}
	onFailure(t, "log", func(f *os.File) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range append(append([]string(nil), l.lines[l.next:]...), l.lines[:l.next]...) {
			fmt.Fprintln(f, line)
		}
	})
	return []kgo.Opt{kgo.WithLogger(l)}
}

// traceGoroutines writes, with KORDER_TRACE, where every goroutine waits
// if the test failed; registered after the Producer's Close, it runs before
// it.
func traceGoroutines(t *testing.T) {
	onFailure(t, "goroutines", func(f *os.File) { _ = pprof.Lookup("goroutine").WriteTo(f, 2) })
}

// onFailure, with KORDER_TRACE set to a directory, has write fill a file of
// it, named after the test, if the test failed.
func onFailure(t *testing.T, ext string, write func(*os.File)) {
	dir := os.Getenv("KORDER_TRACE")
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		name := fmt.Sprintf("%s/trace-%s-%d.%s", dir, strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano(), ext)
		if f, err := os.Create(name); err == nil {
			write(f)
			f.Close()
			t.Logf("%s written to %s", ext, name)
		}
	})
}
