// Package proc starts and stops the child processes of the tests, the demo
// and the benchmarks — the local Functions Framework runner, etcd and
// kube-apiserver, the publisher's binary — in one way: build, start with
// its output where the caller wants it, wait until it is ready (or says
// why not by exiting), and stop it with SIGINT, then SIGKILL after a
// grace period. On Linux a child also dies with the process that started
// it (PR_SET_PDEATHSIG), so that a test binary killed by go test's timeout
// or by a signal leaves no etcd or kube-apiserver behind.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// DefaultGrace is how long Stop waits after SIGINT before SIGKILL.
const DefaultGrace = 5 * time.Second

// Options say how to start a process.
type Options struct {
	Args []string
	// Env entries (KEY=value) are added to this process's environment,
	// later ones winning.
	Env []string
	// Stdout and Stderr receive its output; nil discards it.
	Stdout, Stderr io.Writer
	// Grace is how long Stop waits after SIGINT; DefaultGrace when 0.
	Grace time.Duration
}

// Process is a started child process.
type Process struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{}
	grace time.Duration
	once  sync.Once
}

// Start starts bin as name (for errors) with opts.
func Start(name, bin string, opts Options) (*Process, error) {
	cmd := exec.Command(bin, opts.Args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = opts.Stdout, opts.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{}), grace: opts.Grace}
	if p.grace == 0 {
		p.grace = DefaultGrace
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited and its output is written.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop interrupts the process, kills it if it is still running after the
// grace period, and waits for it; once, however often it is called.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(p.grace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// ErrExited is returned by WaitReady when the process exits first.
var ErrExited = errors.New("exited while starting")

// WaitReady polls ready every 50 ms until it holds, the process exits
// (ErrExited), ctx ends, or timeout passes.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s %w", p.name, ErrExited)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", p.name, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v", p.name, timeout)
		}
	}
	return nil
}

// Listening reports whether something accepts TCP connections on addr.
func Listening(addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

// FreePort is a loopback TCP port nothing listened on a moment ago.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// Build compiles the main package pkg (an import path, or a path relative
// to dir) into the binary out, in dir ("" for the current directory).
func Build(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Pid is the process's ID, for reading its /proc entries.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
