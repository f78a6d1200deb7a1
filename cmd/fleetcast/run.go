package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/firestore"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// errUsage is returned after usage was printed.
var errUsage = errors.New("usage")

const usage = `fleetcast shows what every Agones fleet in every cluster can serve.

Usage:
  fleetcast get fleets   [-l selector] [--cluster c]... [-n namespace] [--include-stale] [-o table|wide|json|yaml]
  fleetcast get clusters [-o table|json|yaml]
  fleetcast labels KEY   [--include-stale] [-o table|json|yaml]
  fleetcast watch        [-l selector] [--cluster c]...

Where the data comes from (every command):
  --project P      Firestore's project (default $GOOGLE_CLOUD_PROJECT); FIRESTORE_EMULATOR_HOST is honoured
  --database D     Firestore database (default (default))
  --api URL        read the QueryFleets API instead (watch: its stream), with a Google ID token unless URL is on localhost
  --stale-after D  a cluster without a heartbeat for D is stale (default 90s; with --api, the API judges,
                   and watch marks every cluster stale when the stream is silent for D)

Run 'fleetcast COMMAND --help' for a command's flags.
`

// options are the flags of every command.
type options struct {
	project, database, api string
	staleAfter             time.Duration
	selector, namespace    string
	clusters               []string
	output                 string
	includeStale           bool
}

func newFlags(name string, o *options, getenv func(string) string, stderr io.Writer, outputs ...string) *flag.FlagSet {
	fs := flag.NewFlagSet("fleetcast "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.project, "project", getenv("GOOGLE_CLOUD_PROJECT"), "Firestore's Google Cloud project")
	fs.StringVar(&o.database, "database", firestore.DefaultDatabaseID, "Firestore database")
	fs.StringVar(&o.api, "api", getenv("FLEETCAST_API"), "URL of the QueryFleets API (instead of Firestore)")
	fs.DurationVar(&o.staleAfter, "stale-after", fleetapi.DefaultStaleAfter, "heartbeat age after which a cluster is stale")
	if len(outputs) > 0 {
		fs.StringVar(&o.output, "o", outputs[0], "output: "+strings.Join(outputs, ", "))
	}
	return fs
}

func fleetFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.selector, "l", "", "label selector, e.g. platform=pc,version in (1.41,1.42)")
	fs.StringVar(&o.namespace, "n", "", "namespace")
	fs.Func("cluster", "only this cluster (repeatable)", func(s string) error {
		o.clusters = append(o.clusters, strings.Split(s, ",")...)
		return nil
	})
	fs.BoolVar(&o.includeStale, "include-stale", false, "include fleets of stale clusters")
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	var o options
	var fs *flag.FlagSet
	var cmd string
	switch {
	case args[0] == "get" && len(args) > 1 && (args[1] == "fleets" || args[1] == "fleet"):
		cmd, fs = "get fleets", newFlags("get fleets", &o, getenv, stderr, "table", "wide", "json", "yaml")
		fleetFlags(fs, &o)
		args = args[2:]
	case args[0] == "get" && len(args) > 1 && (args[1] == "clusters" || args[1] == "cluster"):
		cmd, fs = "get clusters", newFlags("get clusters", &o, getenv, stderr, "table", "json", "yaml")
		args = args[2:]
	case args[0] == "labels":
		cmd, fs = "labels", newFlags("labels", &o, getenv, stderr, "table", "json", "yaml")
		fs.BoolVar(&o.includeStale, "include-stale", false, "include fleets of stale clusters")
		args = args[1:]
	case args[0] == "watch":
		cmd, fs = "watch", newFlags("watch", &o, getenv, stderr)
		fleetFlags(fs, &o)
		args = args[1:]
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", strings.Join(args[:min(2, len(args))], " "))
	}
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if o.output != "" && !slices.Contains([]string{"table", "wide", "json", "yaml"}, o.output) || (o.output == "wide" && cmd != "get fleets") {
		return fmt.Errorf("-o %s: not an output of %s", o.output, cmd)
	}
	switch cmd {
	case "labels":
		if len(rest) != 1 {
			return errors.New("labels takes one label key, e.g. fleetcast labels app.kubernetes.io/version")
		}
	default:
		if len(rest) != 0 {
			return fmt.Errorf("%s: unexpected arguments %q", cmd, rest)
		}
	}
	if cmd == "watch" {
		return watch(ctx, o, stdout, stderr)
	}
	api, closeAPI, err := newAPI(ctx, o)
	if err != nil {
		return err
	}
	defer closeAPI()
	switch cmd {
	case "get fleets":
		q, err := fleetapi.ParseQuery(fleetParams(o))
		if err != nil {
			return flagError(err)
		}
		fleets, err := fleetapi.AllFleets(ctx, api, q)
		if err != nil {
			return flagError(err)
		}
		return printFleets(stdout, o.output, fleets)
	case "get clusters":
		clusters, err := api.ListClusters(ctx)
		if err != nil {
			return err
		}
		return printClusters(stdout, o.output, clusters.Items)
	default:
		lv, err := api.LabelValues(ctx, rest[0], o.includeStale)
		if err != nil {
			return flagError(err)
		}
		return printLabels(stdout, o.output, lv)
	}
}

// parseInterleaved parses flags before and after positional arguments
// (fleetcast labels KEY -o json), and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func fleetParams(o options) url.Values {
	v := url.Values{}
	for _, c := range o.clusters {
		v.Add("cluster", c)
	}
	if o.namespace != "" {
		v.Set("namespace", o.namespace)
	}
	if o.selector != "" {
		v.Set("selector", o.selector)
	}
	if o.includeStale {
		v.Set("includeStale", "true")
	}
	return v
}

// newAPI returns where the commands read: the HTTP API, or Firestore
// through the same read model the API answers from.
func newAPI(ctx context.Context, o options) (fleetapi.API, func(), error) {
	if o.api != "" {
		c, err := fleetapi.NewClient(ctx, o.api, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("--api: %w", err)
		}
		return c, func() {}, nil
	}
	client, err := firestoreClient(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	svc := fleetapi.NewService(firestoredb.New(client, fleet.DefaultTombstoneRetention, time.Now), fleetapi.Options{StaleAfter: o.staleAfter})
	return svc, func() { _ = client.Close() }, nil
}

func firestoreClient(ctx context.Context, o options) (*firestore.Client, error) {
	if o.project == "" {
		return nil, errors.New("no project: set --project or GOOGLE_CLOUD_PROJECT (or --api)")
	}
	c, err := firestore.NewClientWithDatabase(ctx, o.project, o.database)
	if err != nil {
		return nil, fmt.Errorf("firestore: %w", err)
	}
	return c, nil
}

// flagError names the flag behind a bad query parameter.
func flagError(err error) error {
	if e, ok := errors.AsType[*fleetapi.Error](err); ok && e.Code == fleetapi.InvalidArgument {
		flagName := map[string]string{"selector": "-l", "namespace": "-n", "cluster": "--cluster", "key": "KEY"}[e.Param]
		if flagName != "" {
			return fmt.Errorf("%s: %s", flagName, e.Message)
		}
	}
	return err
}

func printStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func printFleets(w io.Writer, format string, fleets []fleetapi.Fleet) error {
	if format == "json" || format == "yaml" {
		return printStructured(w, format, map[string]any{"items": nonNilSlice(fleets)})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := "CLUSTER\tNAMESPACE\tNAME\tREADY\tALLOCATED\tREPLICAS\tLAG\tSTALE"
	if format == "wide" {
		header += "\tCOUNTERS\tLABELS\tDEGRADED"
	}
	fmt.Fprintln(tw, header)
	for _, f := range fleets {
		fmt.Fprintln(tw, fleetRow(f, format == "wide"))
	}
	return tw.Flush()
}

func fleetRow(f fleetapi.Fleet, wide bool) string {
	row := fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\t%t", f.Cluster, f.Namespace, f.Name,
		f.ReadyReplicas, f.AllocatedReplicas, f.CurrentReplicas, f.Replicas,
		(time.Duration(f.LagMillis) * time.Millisecond).String(), f.Stale)
	if wide {
		var counters []string
		for _, k := range slices.Sorted(maps.Keys(f.Counters)) {
			c := f.Counters[k]
			counters = append(counters, fmt.Sprintf("%s=%d/%d", k, c.Available, c.Capacity))
		}
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
			ls = append(ls, k+"="+f.Labels[k])
		}
		row += "\t" + orNone(strings.Join(counters, ",")) + "\t" + orNone(strings.Join(ls, ",")) + "\t" + orNone(f.Degraded)
	}
	return row
}

func printClusters(w io.Writer, format string, clusters []fleetapi.Cluster) error {
	if format == "json" || format == "yaml" {
		return printStructured(w, format, map[string]any{"items": nonNilSlice(clusters)})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tFLEETS\tREADY\tALLOCATED\tHEARTBEAT\tSTALE\tPUBLISHER\tLABELS")
	for _, c := range clusters {
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			ls = append(ls, k+"="+c.Labels[k])
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%t\t%s\t%s\n", c.Cluster, c.FleetCount, c.Totals.ReadyReplicas, c.Totals.AllocatedReplicas,
			c.HeartbeatAt.UTC().Format(time.RFC3339), c.Stale, c.Publisher.ID, orNone(strings.Join(ls, ",")))
	}
	return tw.Flush()
}

func printLabels(w io.Writer, format string, lv fleetapi.LabelValues) error {
	if format == "json" || format == "yaml" {
		return printStructured(w, format, lv)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintf(tw, "%s\tFLEETS\tREADY\tALLOCATED\tCLUSTERS\n", strings.ToUpper(lv.Key))
	for _, v := range lv.Values {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", orNone(v.Value), v.Fleets, v.ReadyReplicas, v.AllocatedReplicas, strings.Join(v.Clusters, ","))
	}
	return tw.Flush()
}

// watch prints the matching fleets, then a row for every change, like
// kubectl get -w, until ctx ends.
func watch(ctx context.Context, o options, w, errOut io.Writer) error {
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("-l: %w", err)
	}
	// From the query API's stream, or from Firestore's listeners.
	start := func(opts fleetwatch.Options) (*fleetwatch.View, error) {
		base, hc, err := fleetapi.HTTPClient(ctx, o.api)
		if err != nil {
			return nil, fmt.Errorf("--api: %w", err)
		}
		return fleetwatch.WatchAPI(ctx, fleetcastv1connect.NewInformationServiceClient(hc, base), opts)
	}
	if o.api == "" {
		client, err := firestoreClient(ctx, o)
		if err != nil {
			return err
		}
		defer client.Close()
		start = func(opts fleetwatch.Options) (*fleetwatch.View, error) { return fleetwatch.Watch(ctx, client, opts) }
	}
	var mu sync.Mutex // the initial table is printed before any change
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	show := func(change string, f fleetapi.Fleet) {
		if sel.Matches(labels.Set(f.Labels)) && (o.namespace == "" || f.Namespace == o.namespace) {
			fmt.Fprintf(tw, "%s\t%s\n", change, fleetRow(f, false))
		}
	}
	// Held until the initial table is out: changes wait for it.
	mu.Lock()
	v, err := start(fleetwatch.Options{
		Clusters:   o.clusters,
		StaleAfter: o.staleAfter,
		OnChange: func(c fleetwatch.Change) {
			mu.Lock()
			defer mu.Unlock()
			if c.Cluster != "" { // a cluster turned stale or fresh
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t%v\n", strings.ToUpper(string(c.Kind)), c.Cluster, c.Kind == fleetwatch.ClusterStale)
			} else {
				show(strings.ToUpper(string(c.Kind)), c.Fleet)
			}
			_ = tw.Flush()
		},
		OnError: func(err error) { fmt.Fprintf(errOut, "fleetcast watch: %v; retrying\n", err) },
	})
	if err != nil {
		mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintln(tw, "CHANGE\tCLUSTER\tNAMESPACE\tNAME\tREADY\tALLOCATED\tREPLICAS\tLAG\tSTALE")
	for _, f := range v.Fleets(sel) {
		show("-", f)
	}
	_ = tw.Flush()
	mu.Unlock()
	<-v.Done()
	if ctx.Err() != nil {
		return nil
	}
	return v.Err()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
