package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/spf13/cobra"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
)

// global are the flags every command has: where it reads, and how long
// it waits. Each command keeps its own flags.
type global struct {
	project, database, api string
	impersonate            string
	staleAfter             time.Duration
	requestTimeout         time.Duration
	getenv                 func(string) string
	now                    func() time.Time // tables' ages are as of now()
}

// clock is the CLI's clock; tests fix it, so that their ages are known.
var clock = time.Now

// run runs the command line args and returns its error (nil after
// --help).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	_, err := runWith(ctx, args, getenv, stdout, stderr)
	return err
}

// runWith is run, and returns the global flags it parsed, for the message.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (*global, error) {
	g := &global{getenv: getenv, now: clock}
	root := newRoot(ctx, g, stdout, stderr)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	return g, err
}

const rootLong = `fleetcast shows what every Agones fleet in every cluster can serve, from Firestore (honouring
FIRESTORE_EMULATOR_HOST) or from the QueryFleets API (--api).

Exit codes: 0 done, 1 failed, 2 bad input, 3 not found, 4 unavailable or timed out, 5 not allowed.`

func newRoot(ctx context.Context, g *global, stdout, stderr io.Writer) *cobra.Command {
	if g.getenv == nil {
		g.getenv = func(string) string { return "" }
	}
	root := &cobra.Command{
		Use:           "fleetcast",
		Short:         "Show what every Agones fleet in every cluster can serve",
		Long:          rootLong,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return usagef("no command; run fleetcast --help") },
	}
	root.SetContext(ctx)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentPreRun = func(*cobra.Command, []string) {
		if u, err := url.Parse(g.api); err == nil && u.Scheme == "http" && !fleetclient.IsLoopback(u.Hostname()) {
			fmt.Fprintf(stderr, "fleetcast: --api %s is plain http: no ID token is sent over it (a Cloud Function wants https://)\n", g.api)
		}
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usagef("%s: %w (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&g.project, "project", g.getenv("GOOGLE_CLOUD_PROJECT"), "Firestore's Google Cloud project (default $GOOGLE_CLOUD_PROJECT, then gcloud's configured project)")
	pf.StringVar(&g.database, "database", firestore.DefaultDatabaseID, "Firestore database")
	pf.StringVar(&g.api, "api", g.getenv("FLEETCAST_API"), "read the QueryFleets API at this URL instead of Firestore (default $FLEETCAST_API)")
	pf.StringVar(&g.impersonate, "impersonate-service-account", "", "with --api: get the ID tokens as this service account (IAM Credentials API)")
	pf.DurationVar(&g.staleAfter, "stale-after", fleetapi.DefaultStaleAfter, "a cluster without a heartbeat for this long is stale (with --api, the API judges)")
	pf.DurationVar(&g.requestTimeout, "request-timeout", 30*time.Second, "give up on a request (watch: on its start) after this long")

	get := &cobra.Command{
		Use:   "get",
		Short: "Show fleets or clusters",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("get %s: unknown resource; want fleets, fleet CLUSTER/NAMESPACE/NAME or clusters%s", args[0], suggest(cmd, args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("get what? fleets, fleet CLUSTER/NAMESPACE/NAME or clusters (see fleetcast get --help)")
		},
	}
	get.AddCommand(newGetFleets(g, stdout, stderr), newGetClusters(g, stdout))
	root.AddCommand(get, newLabels(g, stdout), newWatch(g, stdout, stderr), newPlace(g, stdout), newAllocate(g, stdout, stderr), newVersion(g, stdout))
	argsAreInput(root)
	return root
}

// noArgs rejects positional arguments as bad input, suggesting the
// command a mistyped one meant.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usagef("unknown command %q for %s%s (see %s --help)", args[0], cmd.CommandPath(), suggest(cmd, args[0]), cmd.CommandPath())
		}
		return usagef("%s: unexpected arguments %q (see %s --help)", cmd.CommandPath(), args, cmd.CommandPath())
	}
	return nil
}

// suggest is "; did you mean X?" for the subcommands of cmd near typed,
// as cobra's own suggestions, on the one line of the error.
func suggest(cmd *cobra.Command, typed string) string {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if s := cmd.SuggestionsFor(typed); len(s) > 0 {
		return "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return ""
}

// argsAreInput makes every command's argument errors bad input (exit 2),
// cobra's own validators' (cobra.MaximumNArgs) included.
func argsAreInput(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				if _, ok := err.(usageError); ok {
					return err
				}
				return usagef("%s: %w (see %s --help)", c.CommandPath(), err, c.CommandPath())
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		argsAreInput(sub)
	}
}
