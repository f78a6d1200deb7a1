// Command benchdoc writes BENCHMARKS.md from the output of one `make bench`
// run (go test -bench text), which begins with what the run measured and
// where: the commit checked out and the machine, which `benchdoc -record`
// prints before the benchmarks start.
//
//	go run ./internal/cmd/benchdoc -record > bin/bench.txt
//	go test -bench ... >> bin/bench.txt
//	go run ./internal/cmd/benchdoc -o BENCHMARKS.md bin/bench.txt
//
// The control plane's versions come from $KUBE_APISERVER and $ETCD (paths
// named <binary>-<version>, as scripts/controlplane.sh builds them), the
// emulators' from `gcloud version`, the commit from git.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fleetcast/fleetcast/internal/build/benchdoc"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() {
	cli.Main("benchdoc", func(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
		return run(ctx, args, os.Stdin, stdout, stderr)
	})
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchdoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "BENCHMARKS.md", "the document to write")
	record := fs.Bool("record", false, "print the commit checked out and this machine, the lines a run's output begins with, and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: benchdoc [-o BENCHMARKS.md] [bench-output.txt]   (standard input when no file)\n       benchdoc -record")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *record {
		if fs.NArg() > 0 {
			return errors.New("-record takes no file")
		}
		src, err := source(ctx)
		if err != nil {
			return err
		}
		return benchdoc.Record(stdout, src, machine(""))
	}
	in := stdin
	switch fs.NArg() {
	case 0:
	case 1:
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	default:
		fs.Usage()
		return errors.New("at most one input file")
	}
	r, err := benchdoc.Parse(in)
	if err != nil {
		return err
	}
	if r.Source.Modified {
		fmt.Fprintf(stderr, "benchdoc: the run measured %s with uncommitted changes; the document says so\n", r.Source.Short())
	}
	var doc bytes.Buffer
	if err := benchdoc.Render(&doc, r); err != nil {
		return fmt.Errorf("render %s: %w", *out, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".benchdoc-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(doc.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "benchdoc: wrote %s from %d benchmarks\n", *out, len(r.Results))
	return nil
}

// source is the commit checked out here, and whether tracked files differ
// from it.
func source(ctx context.Context) (benchdoc.Source, error) {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return benchdoc.Source{}, fmt.Errorf("git rev-parse HEAD: %w (make bench runs in a clone of the repository)", err)
	}
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return benchdoc.Source{}, fmt.Errorf("git status: %w", err)
	}
	return benchdoc.Source{Commit: strings.TrimSpace(string(head)), Modified: len(bytes.TrimSpace(status)) > 0}, nil
}

// machine describes this machine; what cannot be found reads "unknown".
func machine(cpuHeader string) benchdoc.Machine {
	m := benchdoc.Machine{
		Date:              time.Now().UTC().Format("2006-01-02"),
		CPU:               cmp.Or(procField("/proc/cpuinfo", "model name", ":"), cpuHeader, "unknown"),
		Cores:             runtime.NumCPU(),
		Go:                strings.TrimPrefix(runtime.Version(), "go"),
		OS:                cmp.Or(strings.Trim(procField("/etc/os-release", "PRETTY_NAME", "="), `"`), "unknown"),
		KubeAPIServer:     versionOf(os.Getenv("KUBE_APISERVER"), "kube-apiserver-"),
		Etcd:              versionOf(os.Getenv("ETCD"), "etcd-"),
		CloudSDK:          "unknown",
		FirestoreEmulator: "unknown",
		PubSubEmulator:    "unknown",
	}
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal", ":"), " kB"), 64); err == nil {
		m.Memory = fmt.Sprintf("%.0f GiB", kb/(1<<20))
	} else {
		m.Memory = "unknown"
	}
	if out, err := exec.Command("gcloud", "version").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			name, version, _ := strings.Cut(line, " ")
			switch {
			case strings.HasPrefix(line, "Google Cloud SDK "):
				m.CloudSDK = strings.TrimPrefix(line, "Google Cloud SDK ")
			case name == "cloud-firestore-emulator":
				m.FirestoreEmulator = version
			case name == "pubsub-emulator":
				m.PubSubEmulator = version
			}
		}
	}
	return m
}

// procField returns the value of the first "key<sep>value" line of a file.
func procField(path, key, sep string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// versionOf takes the version from a binary's directory, named
// <prefix><version>[-stamped] by scripts/controlplane.sh (-stamped: built
// telling its version).
func versionOf(binary, prefix string) string {
	dir := filepath.Base(filepath.Dir(binary))
	if binary == "" || !strings.HasPrefix(dir, prefix) {
		return "unknown"
	}
	return strings.TrimSuffix(strings.TrimPrefix(dir, prefix), "-stamped")
}
