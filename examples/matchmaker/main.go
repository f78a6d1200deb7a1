// Command matchmaker is an example a studio can copy: it keeps a live view
// of every fleet with fleetwatch and routes each incoming player to the
// best fleet for their platform and game version, printing each decision.
//
// Players arrive on standard input, one per line: "NAME PLATFORM VERSION",
// e.g. "alice pc 1.42". Run it against the emulator:
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
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "matchmaker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("matchmaker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	project := fs.String("project", getenv("GOOGLE_CLOUD_PROJECT"), "Firestore's project")
	counter := fs.String("counter", "", "pick by most available capacity of this counter (default: most ready replicas)")
	versionLabel := fs.String("version-label", "app.kubernetes.io/version", "the label holding the game version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *project == "" {
		return errors.New("set --project or GOOGLE_CLOUD_PROJECT")
	}
	client, err := firestore.NewClient(ctx, *project)
	if err != nil {
		return err
	}
	defer client.Close()
	view, err := fleetwatch.Watch(ctx, client, fleetwatch.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "watching %d fleets\n", len(view.Fleets(nil)))

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
		f, err := view.Pick(selector, fleetwatch.Policy{Counter: *counter})
		if errors.Is(err, fleetwatch.ErrNoFleet) {
			fmt.Fprintf(stdout, "%s (%s %s): no fleet with capacity; queueing\n", player, platform, version)
			continue
		}
		fmt.Fprintf(stdout, "%s (%s %s) -> %s/%s/%s (%d ready)\n", player, platform, version, f.Cluster, f.Namespace, f.Name, f.ReadyReplicas)
	}
	return lines.Err()
}
