// Command matchmaker is an example a studio can copy: it keeps a live view
// of every fleet with fleetwatch and routes each incoming player to a
// fleet for their platform and game version — among several, drawn in
// proportion to their rank, so that many replicas of it spread players
// over the fleets — printing each decision.
//
// Players arrive on standard input, one per line: "NAME PLATFORM VERSION",
// e.g. "alice pc 1.42". --rank chooses what weighs a fleet (ready, players,
// counter=NAME, list=NAME), --prefer (repeatable) the clusters to try
// first by their labels; each decision says what ranked it and whether a
// preference chose. Clusters turning stale or fresh are printed, errors
// retried go to standard error, and bad flags or an unreadable Firestore
// end it with an error. Run it against the emulator:
//
//	FIRESTORE_EMULATOR_HOST=127.0.0.1:8080 go run ./examples/matchmaker --project demo < players.txt
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"cloud.google.com/go/firestore"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleetwatch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h has printed the usage
		fmt.Fprintf(os.Stderr, "matchmaker: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("matchmaker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	project := fs.String("project", getenv("GOOGLE_CLOUD_PROJECT"), "Firestore's project")
	rankFlag := fs.String("rank", "ready", "rank fleets by: ready, players, counter=NAME or list=NAME (available capacity)")
	counter := fs.String("counter", "", "same as --rank counter=NAME")
	var prefer []labels.Selector
	fs.Func("prefer", "prefer clusters with these labels (a selector, e.g. region=eu); repeat for fallbacks, in order", func(s string) error {
		sel, err := labels.Parse(s)
		if err != nil {
			return fmt.Errorf("not a label selector: %w", err)
		}
		prefer = append(prefer, sel)
		return nil
	})
	startTimeout := fs.Duration("start-timeout", fleetwatch.DefaultStartTimeout, "give up if the fleets cannot be read within this")
	versionLabel := fs.String("version-label", "app.kubernetes.io/version", "the label holding the game version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: players come on standard input", fs.Args())
	}
	if *project == "" {
		return errors.New("set --project or GOOGLE_CLOUD_PROJECT")
	}
	if *counter != "" {
		*rankFlag = "counter=" + *counter
	}
	rank, err := parseRank(*rankFlag)
	if err != nil {
		return err
	}
	client, err := firestore.NewClient(ctx, *project)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the watch ends before the client closes
	view, err := fleetwatch.Watch(ctx, client, fleetwatch.Options{
		StartTimeout: *startTimeout,
		OnChange: func(c fleetwatch.Change) {
			switch c.Kind {
			case fleetwatch.ClusterStale:
				fmt.Fprintf(stdout, "cluster %s is stale: its fleets are not picked until it is heard from\n", c.Cluster)
			case fleetwatch.ClusterFresh:
				fmt.Fprintf(stdout, "cluster %s is fresh again\n", c.Cluster)
			}
		},
		OnError: func(err error) { fmt.Fprintf(stderr, "matchmaker: %v (retrying)\n", err) },
	})
	if err != nil {
		return fmt.Errorf("reading the fleets of project %s: %w", *project, err)
	}
	defer func() {
		cancel()
		<-view.Done() // nothing more is printed
	}()
	fmt.Fprintf(stdout, "watching %d fleets, ranking by %s\n", len(view.Fleets(nil)), *rankFlag)
	policy := fleetwatch.Policy{Rank: rank, Prefer: prefer}

	lines := bufio.NewScanner(stdin)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			fmt.Fprintf(stdout, "skipping %q: want NAME PLATFORM VERSION\n", lines.Text())
			continue
		}
		player, platform, version := fields[0], fields[1], fields[2]
		selector := labels.SelectorFromSet(labels.Set{"platform": platform, *versionLabel: version})
		f, tier, err := view.Choose(selector, policy)
		if errors.Is(err, fleetwatch.ErrNoFleet) {
			fmt.Fprintf(stdout, "%s (%s %s): no fleet with capacity; queueing\n", player, platform, version)
			continue
		}
		why := ""
		switch {
		case len(prefer) == 0:
		case tier < len(prefer):
			why = fmt.Sprintf(", preferred %s", prefer[tier])
		default:
			why = ", no preferred cluster had one"
		}
		fmt.Fprintf(stdout, "%s (%s %s) -> %s/%s/%s (%d ready, %s %d%s)\n", player, platform, version, f.Cluster, f.Namespace, f.Name,
			f.ReadyReplicas, *rankFlag, rank(f), why)
	}
	return lines.Err()
}

// parseRank reads --rank.
func parseRank(s string) (fleetwatch.Rank, error) {
	kind, name, _ := strings.Cut(s, "=")
	switch {
	case s == "ready":
		return fleetwatch.ByReady, nil
	case s == "players":
		return fleetwatch.ByPlayers, nil
	case kind == "counter" && name != "":
		return fleetwatch.ByCounter(name), nil
	case kind == "list" && name != "":
		return fleetwatch.ByList(name), nil
	}
	return nil, fmt.Errorf("--rank %q: want ready, players, counter=NAME or list=NAME", s)
}
