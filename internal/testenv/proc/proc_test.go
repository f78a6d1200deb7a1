package proc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary plays a parent that starts a child through Start, prints
// the child's PID and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("PROC_TEST_PARENT") == "1" {
		p, err := Start("sleep", "sleep", Options{Args: []string{"300"}})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(p.cmd.Process.Pid)
		select {}
	}
	os.Exit(m.Run())
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestAChildDiesWithItsParent: a test binary killed outright (go test's
// timeout, a Ctrl-C's second signal) leaves no child behind.
func TestAChildDiesWithItsParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PR_SET_PDEATHSIG is Linux's")
	}
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "PROC_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, line)
	require.True(t, alive(child))

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	require.Eventually(t, func() bool {
		// Reaped by init once killed; until then a zombie, which kill(0)
		// still finds: read its state.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		return err != nil || strings.Contains(string(b), ") Z ")
	}, 10*time.Second, 20*time.Millisecond, "the child %d outlived its parent", child)
}

func TestStopInterruptsThenKills(t *testing.T) {
	p, err := Start("stubborn", "sh", Options{Args: []string{"-c", `trap "" INT; sleep 30`}, Grace: 200 * time.Millisecond})
	require.NoError(t, err)
	p.Stop()
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	p.Stop() // once is enough; again is harmless

	polite, err := Start("polite", "sleep", Options{Args: []string{"30"}})
	require.NoError(t, err)
	polite.Stop()
	assert.Equal(t, "signal: interrupt", polite.cmd.ProcessState.String(), "SIGINT first")
}

func TestWaitReady(t *testing.T) {
	p, err := Start("quitter", "false", Options{})
	require.NoError(t, err)
	err = p.WaitReady(context.Background(), 10*time.Second, func() bool { return false })
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), "quitter")

	sleeper, err := Start("sleeper", "sleep", Options{Args: []string{"30"}})
	require.NoError(t, err)
	defer sleeper.Stop()
	calls := 0
	require.NoError(t, sleeper.WaitReady(context.Background(), 10*time.Second, func() bool { calls++; return calls == 3 }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, sleeper.WaitReady(ctx, 10*time.Second, func() bool { return false }), context.Canceled)
}
