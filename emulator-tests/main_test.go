// Package emulatortests runs fleetcast's pipeline against the real Google
// emulators: events are published to a Pub/Sub topic with the Avro schema,
// pushed by a push subscription into IngestFleetEvents served locally by the
// Functions Framework (cmd/fleetcast-functions, a separate process as in the
// cloud), and land in Firestore.
package emulatortests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/logging"
	"k8s.io/klog/v2"
)

// waitTimeout bounds every wait for the pipeline: a push retry takes about a
// second in the emulator, so this is generous.
const waitTimeout = 30 * time.Second

var (
	// project is the Google Cloud project of this package's run: the shared
	// function instance writes to its Firestore database.
	project string
	// functionBinary is cmd/fleetcast-functions, built once.
	functionBinary string
	// ingestFn is the function instance the push subscriptions target.
	ingestFn *function
	// cp is the Kubernetes control plane, when its binaries are built.
	cp    *controlplane.ControlPlane
	cpErr error
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(hostileReadersEnv); spec != "" {
		os.Exit(runHostileReaders(spec))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Getenv(emulator.FirestoreHostEnv) == "" || os.Getenv(emulator.PubSubHostEnv) == "" {
		// Each test reports the missing emulator itself (skip or fail).
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "fleetcast-emulator-tests")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	functionBinary = filepath.Join(dir, "fleetcast-functions")
	if err := proc.Build(context.Background(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast-functions", functionBinary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	project = fmt.Sprintf("fleetcast-it-%d", time.Now().UnixNano()%1_000_000_000)
	ingestFn, err = startFunction(os.Getenv(emulator.FirestoreHostEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ingestFn.stop()
	// The publisher's tests also need a Kubernetes control plane.
	cp, cpErr = controlplane.StartWithAgonesCRDs()
	if cp != nil {
		defer cp.Stop()
	}
	klog.SetSlogLogger(logging.New(kubetest.LogWriter("klog"), slog.LevelInfo))
	return m.Run()
}

// function is one process serving IngestFleetEvents, with its log.
type function struct {
	url  string
	proc *proc.Process
	logs *logCollector
}

// startFunction starts a function instance writing to the Firestore
// emulator at firestoreHost and waits until it accepts connections.
func startFunction(firestoreHost string) (*function, error) {
	return startFunctionTarget("IngestFleetEvents", firestoreHost)
}

// startFunctionTarget starts the local runner serving target; env entries
// (KEY=value) override the defaults.
func startFunctionTarget(target, firestoreHost string, env ...string) (*function, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	return startServing("function "+target, functionBinary, port, append([]string{
		"FUNCTION_TARGET=" + target,
		"PORT=" + port,
		"GOOGLE_CLOUD_PROJECT=" + project,
		emulator.FirestoreHostEnv + "=" + firestoreHost,
		"EVENT_TIMEOUT=3s",
		"LOG_LEVEL=DEBUG",
	}, env...))
}

// startServing starts bin, which serves HTTP on 127.0.0.1:port, with env
// added to this process's environment; it collects the JSON lines of its
// standard output and waits until it accepts connections.
func startServing(name, bin, port string, env []string) (*function, error) {
	logs := &logCollector{}
	out, w := io.Pipe() // closed once the process has exited
	p, err := proc.Start(name, bin, proc.Options{Env: env, Stdout: w, Stderr: os.Stderr})
	if err != nil {
		return nil, err
	}
	go logs.collect(out)
	go func() {
		<-p.Done()
		w.Close()
	}()
	f := &function{url: "http://127.0.0.1:" + port + "/", proc: p, logs: logs}
	if err := p.WaitReady(context.Background(), waitTimeout, proc.Listening("127.0.0.1:"+port)); err != nil {
		p.Stop()
		return nil, err
	}
	return f, nil
}

func (f *function) stop() { f.proc.Stop() }

// logCollector keeps the function's JSON log lines.
type logCollector struct {
	mu    sync.Mutex
	lines []map[string]any
	bytes int64         // of every line, newlines included
	cond  chan struct{} // closed and replaced on every new line
}

// size returns the bytes logged so far.
func (c *logCollector) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (c *logCollector) collect(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// The Functions Framework prints some warnings to stdout without a
		// newline, so a JSON line may follow one on the same line.
		text := sc.Text()
		var line map[string]any
		if i := strings.Index(text, "{"); i < 0 || json.Unmarshal([]byte(text[i:]), &line) != nil {
			line = map[string]any{"raw": text}
		}
		c.mu.Lock()
		c.lines = append(c.lines, line)
		c.bytes += int64(len(text)) + 1
		if c.cond != nil {
			close(c.cond)
			c.cond = nil
		}
		c.mu.Unlock()
	}
	if err := sc.Err(); err != nil {
		// Never stop reading: a function writing to a pipe nobody reads
		// blocks on its next log line, and every request with it.
		fmt.Fprintf(os.Stderr, "function log: %v; the rest of its output is discarded\n", err)
		_, _ = io.Copy(io.Discard, r)
	}
}

// matching returns the lines whose field key equals value.
func (c *logCollector) matching(key, value string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, l := range c.lines {
		if v, _ := l[key].(string); v == value {
			out = append(out, l)
		}
	}
	return out
}

// changed returns a channel closed when a line arrives.
func (c *logCollector) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cond == nil {
		c.cond = make(chan struct{})
	}
	return c.cond
}

// waitMessage waits until the function has logged the outcome of message
// id (processed, dropped or failed) and returns those lines.
func (c *logCollector) waitMessage(tb testing.TB, id string, done func([]map[string]any) bool) []map[string]any {
	tb.Helper()
	return c.wait(tb, "messageId", id, done)
}

// wait waits until the lines whose field key equals value satisfy done,
// and returns them: what a process wrote before it answered may still be
// on its way through the pipe when the answer arrives.
func (c *logCollector) wait(tb testing.TB, key, value string, done func([]map[string]any) bool) []map[string]any {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), waitTimeout)
	defer cancel()
	for {
		ch := c.changed()
		lines := c.matching(key, value)
		if len(lines) > 0 && done(lines) {
			return lines
		}
		select {
		case <-ch:
		case <-ctx.Done():
			tb.Fatalf("%s %s: no final log line within %v; lines so far: %v", key, value, waitTimeout, lines)
			return nil
		}
	}
}

// ingested reports whether the lines include the final INFO of a message.
func ingested(lines []map[string]any) bool {
	for _, l := range lines {
		if l["message"] == "fleet event ingested" {
			return true
		}
	}
	return false
}

// dropped reports whether the lines include the ERROR of a dropped message.
func dropped(lines []map[string]any) bool {
	for _, l := range lines {
		if l["severity"] == "ERROR" && strings.HasPrefix(fmt.Sprint(l["message"]), "dropping") {
			return true
		}
	}
	return false
}
