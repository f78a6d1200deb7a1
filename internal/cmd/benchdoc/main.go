// Command benchdoc writes BENCHMARKS.md from the output of one `make bench`
// run (go test -bench text), with a description of the machine it runs on.
//
//	go run ./internal/cmd/benchdoc -o BENCHMARKS.md bin/bench.txt
//
// The control plane's versions come from $KUBE_APISERVER and $ETCD (paths
// named <binary>-<version>, as scripts/controlplane.sh builds them), the
// emulators' from `gcloud version`.
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
	cli.Main("benchdoc", func(_ context.Context, args []string, _ func(string) string, _, stderr io.Writer) error {
		return run(args, os.Stdin, stderr)
	})
}

func run(args []string, stdin io.Reader, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchdoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "BENCHMARKS.md", "the document to write")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: benchdoc [-o BENCHMARKS.md] [bench-output.txt]   (standard input when no file)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
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
	m := machine(r.Header["cpu"])
	var doc bytes.Buffer
	if err := benchdoc.Render(&doc, r, m); err != nil {
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
