package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetcast/fleetcast/publisher"
)

// checkUsage is fleetcast-publisher check's help.
const checkUsage = `usage: fleetcast-publisher check --endpoint HOST:PORT [--snapshot-interval 30s] [--wait 2m]

Asks every replica of a publisher — each address HOST resolves to (a headless
Service's name gives them all), at PORT (--metrics-addr's) — for /readyz and
/metrics, and exits 0 once the cluster is being published: every replica
answers, exactly one leads, the leader is ready and stamped a snapshot within
two snapshot intervals, and it has published to Pub/Sub. Until then it asks
again, for up to --wait, then exits 1 saying what is wrong. The chart's helm
test runs it.
`

// runCheck is fleetcast-publisher check (publisher.Check).
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetcast-publisher check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.PrintDefaults() }
	endpoint := fs.String("endpoint", "", "HOST:PORT of the publisher's /readyz and /metrics (required)")
	interval := fs.Duration("snapshot-interval", 30*time.Second, "the publisher's --snapshot-interval")
	within := fs.Duration("wait", 2*time.Minute, "how long to ask again while the check fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check: unexpected arguments %q", fs.Args())
	}
	host, port, err := net.SplitHostPort(*endpoint)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("check: --endpoint %q: want HOST:PORT", *endpoint)
	}
	if *interval <= 0 {
		return fmt.Errorf("check: --snapshot-interval %s: want a positive duration", *interval)
	}
	var last error
	var replicas []publisher.Replica
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, *within, true, func(ctx context.Context) (bool, error) {
		replicas, last = publisher.Check(ctx, host, port, publisher.CheckOptions{SnapshotInterval: *interval})
		if last != nil {
			fmt.Fprintf(stderr, "check: not yet (%s): %v\n", time.Since(start).Round(time.Second), last)
		}
		return last == nil, nil
	})
	for _, r := range replicas {
		fmt.Fprintln(stdout, r)
	}
	if err != nil {
		if last == nil {
			last = err
		}
		return fmt.Errorf("check: the cluster is not being published, after %s: %w", time.Since(start).Round(time.Second), last)
	}
	fmt.Fprintf(stdout, "check: publishing (%d replicas)\n", len(replicas))
	return nil
}
