package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// options are the flags of every command.
type options struct {
	project, database, api string
	impersonate            string
	staleAfter             time.Duration
	requestTimeout         time.Duration
	selector, namespace    string
	clusters               []string
	output                 string
	noHeaders              bool
	includeStale           bool
	sortBy                 string
	minReady               int64
	counter, list          string
	minAvailable           int64
	minListAvailable       int64
	rolloutComplete        string
	watch                  bool
}

// Exit codes: what a script can tell apart.
const (
	exitError       = 1 // anything else
	exitUsage       = 2 // bad input: a command, flag, argument or parameter
	exitNotFound    = 3 // the fleet or cluster asked for does not exist
	exitUnavailable = 4 // Firestore or the API cannot answer now, or not within --request-timeout
	exitPermission  = 5 // the credentials are missing, wrong or not allowed
)

// usageError is bad input: exit code 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode says how err ends the process.
func exitCode(err error) int {
	if _, ok := errors.AsType[usageError](err); ok {
		return exitUsage
	}
	if code, ok := exitCodes[fleetapi.CodeOf(err)]; ok {
		return code
	}
	return exitError
}

// exitCodes map the read model's error codes to the CLI's.
var exitCodes = map[fleetapi.Code]int{
	fleetapi.InvalidArgument:   exitUsage,
	fleetapi.NotFound:          exitNotFound,
	fleetapi.Unavailable:       exitUnavailable,
	fleetapi.ResourceExhausted: exitUnavailable,
	fleetapi.PermissionDenied:  exitPermission,
}

// message is err as the one line the CLI prints, with what to do.
func message(err error, o *options) string {
	msg := err.Error()
	switch exitCode(err) {
	case exitUnavailable:
		where := "Firestore (project " + o.project + ")"
		if o.api != "" {
			where = o.api
		}
		return fmt.Sprintf("%s (no answer from %s within --request-timeout %s: check it is reachable, then retry or raise --request-timeout)",
			msg, where, o.requestTimeout)
	case exitPermission:
		return msg + " (check the credentials: gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS)"
	}
	return msg
}

// run runs the command line args and returns its error (nil after
// --help).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	_, err := runWith(ctx, args, getenv, stdout, stderr)
	return err
}

// runWith is run, and returns the options it parsed, for the message.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (*options, error) {
	o := &options{}
	root := newRoot(ctx, o, getenv, stdout, stderr)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	return o, err
}

const rootLong = `fleetcast shows what every Agones fleet in every cluster can serve, from Firestore (honouring
FIRESTORE_EMULATOR_HOST) or from the QueryFleets API (--api).

Exit codes: 0 done, 1 failed, 2 bad input, 3 not found, 4 unavailable or timed out, 5 not allowed.`

func newRoot(ctx context.Context, o *options, getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
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
		if u, err := url.Parse(o.api); err == nil && u.Scheme == "http" && !fleetclient.IsLoopback(u.Hostname()) {
			fmt.Fprintf(stderr, "fleetcast: --api %s is plain http: no ID token is sent over it (a Cloud Function wants https://)\n", o.api)
		}
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usagef("%s: %w (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&o.project, "project", getenv("GOOGLE_CLOUD_PROJECT"), "Firestore's Google Cloud project (default $GOOGLE_CLOUD_PROJECT)")
	pf.StringVar(&o.database, "database", firestore.DefaultDatabaseID, "Firestore database")
	pf.StringVar(&o.api, "api", getenv("FLEETCAST_API"), "read the QueryFleets API at this URL instead of Firestore (default $FLEETCAST_API)")
	pf.StringVar(&o.impersonate, "impersonate-service-account", "", "with --api: get the ID tokens as this service account (IAM Credentials API)")
	pf.DurationVar(&o.staleAfter, "stale-after", fleetapi.DefaultStaleAfter, "a cluster without a heartbeat for this long is stale (with --api, the API judges)")
	pf.DurationVar(&o.requestTimeout, "request-timeout", 30*time.Second, "give up on a request (watch: on its start) after this long")

	get := &cobra.Command{
		Use:   "get",
		Short: "Show fleets or clusters",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("get %s: unknown resource; want fleets, fleet CLUSTER/NAMESPACE/NAME or clusters", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("get what? fleets, fleet CLUSTER/NAMESPACE/NAME or clusters (see fleetcast get --help)")
		},
	}
	fleets := &cobra.Command{
		Use:     "fleets [CLUSTER/NAMESPACE/NAME]",
		Aliases: []string{"fleet"},
		Short:   "List the fleets, or show one",
		Example: `  fleetcast get fleets -l platform=pc,app.kubernetes.io/version=1.42 --min-ready 2 --sort-by ready
  fleetcast get fleets --counter rooms --min-available 5 -o wide
  fleetcast get fleet pc/games/ranked -o yaml
  fleetcast get fleets -w`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return getFleet(cmd.Context(), o, args[0], stdout)
			}
			if o.watch {
				return watch(cmd.Context(), o, stdout, stderr)
			}
			return getFleets(cmd.Context(), o, stdout)
		},
	}
	filterFlags(fleets, o)
	queryFlags(fleets, o)
	fleets.Flags().BoolVarP(&o.watch, "watch", "w", false, "after the list, print a row for every change, until interrupted")
	outputFlag(fleets, o, "table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE")
	clusters := &cobra.Command{
		Use:     "clusters [NAME]",
		Aliases: []string{"cluster"},
		Short:   "List the clusters, or show one",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return getClusters(cmd.Context(), o, args, stdout)
		},
	}
	outputFlag(clusters, o, "table", "json", "yaml", "name", "jsonpath=TEMPLATE")
	get.AddCommand(fleets, clusters)

	labelsCmd := &cobra.Command{
		Use:     "labels KEY",
		Short:   "Sum the live fleets by the values of a label",
		Example: "  fleetcast labels app.kubernetes.io/version",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("labels takes one label key, e.g. fleetcast labels app.kubernetes.io/version")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return labelValues(cmd.Context(), o, args[0], stdout) },
	}
	labelsCmd.Flags().BoolVar(&o.includeStale, "include-stale", false, "include fleets of stale clusters")
	outputFlag(labelsCmd, o, "table", "json", "yaml", "name", "jsonpath=TEMPLATE")

	watchCmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the fleets, then a row for every change (get fleets -w)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return watch(cmd.Context(), o, stdout, stderr) },
	}
	filterFlags(watchCmd, o)
	outputFlag(watchCmd, o, "table", "wide", "json", "name")

	version := &cobra.Command{
		Use:   "version",
		Short: "Print fleetcast's version",
		Args:  noArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintf(stdout, "fleetcast %s (%s)\n", buildVersion(), runtime.Version())
		},
	}
	root.AddCommand(get, labelsCmd, watchCmd, version)
	return root
}

// noArgs rejects positional arguments as bad input.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected arguments %q (see %s --help)", cmd.CommandPath(), args, cmd.CommandPath())
	}
	return nil
}

// buildVersion is the module's version, as go install records it.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// filterFlags are the filters of the fleet commands, watches included.
func filterFlags(cmd *cobra.Command, o *options) {
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. platform=pc,app.kubernetes.io/version in (1.41,1.42)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "only fleets of this namespace")
	f.StringSliceVar(&o.clusters, "cluster", nil, "only fleets of these clusters (repeatable, or comma-separated)")
	f.BoolVar(&o.includeStale, "include-stale", false, "include fleets of stale clusters (marked)")
}

// queryFlags are get fleets' thresholds and order, which a watch has not.
func queryFlags(cmd *cobra.Command, o *options) {
	f := cmd.Flags()
	f.Int64Var(&o.minReady, "min-ready", 0, "only fleets with at least this many ready game servers")
	f.StringVar(&o.counter, "counter", "", "a counter, for --min-available and --sort-by available")
	f.Int64Var(&o.minAvailable, "min-available", 0, "only fleets whose --counter has at least this much available capacity")
	f.StringVar(&o.list, "list", "", "a list, for --min-list-available and --sort-by available")
	f.Int64Var(&o.minListAvailable, "min-list-available", 0, "only fleets whose --list has at least this much available capacity")
	f.StringVar(&o.rolloutComplete, "rollout-complete", "", "true: only fleets whose rollout is complete; false: only those whose rollout is in progress (a fleet whose rollout is unknown matches neither)")
	f.StringVar(&o.sortBy, "sort-by", "name", "order: name (cluster, namespace, name), ready (most first) or available (of --counter or --list, most first)")
}

// outputFlag adds -o with the outputs the command has.
func outputFlag(cmd *cobra.Command, o *options, outputs ...string) {
	cmd.Flags().StringVarP(&o.output, "output", "o", outputs[0], "output: "+strings.Join(outputs, ", "))
	if slices.Contains(outputs, "table") && cmd.Flags().Lookup("no-headers") == nil {
		cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print tables without their header")
	}
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(c, args); err != nil {
				return err
			}
		}
		name, _, _ := strings.Cut(o.output, "=")
		for _, out := range outputs {
			if out == o.output || strings.HasSuffix(out, "=TEMPLATE") && name == strings.TrimSuffix(out, "=TEMPLATE") && strings.Contains(o.output, "=") {
				return nil
			}
		}
		return usagef("-o %s: not an output of %s (want %s)", o.output, c.CommandPath(), strings.Join(outputs, ", "))
	}
}

// withAPI runs f with the source the flags name, within
// --request-timeout, and closes the source after.
func withAPI(ctx context.Context, o *options, f func(context.Context, fleetapi.API) error) error {
	cancel := context.CancelFunc(func() {})
	if o.requestTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.requestTimeout)
	}
	defer cancel()
	api, closeAPI, err := newAPI(ctx, *o)
	if err != nil {
		return err
	}
	defer closeAPI()
	return f(ctx, api)
}

func getFleets(ctx context.Context, o *options, w io.Writer) error {
	q, err := fleetapi.ParseQuery(fleetParams(*o))
	if err != nil {
		return flagError(err)
	}
	return withAPI(ctx, o, func(ctx context.Context, api fleetapi.API) error {
		fleets, err := fleetapi.AllFleets(ctx, api, q)
		if err != nil {
			return flagError(err)
		}
		return printFleets(w, o, fleets)
	})
}

func getFleet(ctx context.Context, o *options, arg string, w io.Writer) error {
	parts := strings.Split(arg, "/")
	if len(parts) != 3 {
		return usagef("fleet %q: want CLUSTER/NAMESPACE/NAME, e.g. pc/games/ranked", arg)
	}
	return withAPI(ctx, o, func(ctx context.Context, api fleetapi.API) error {
		f, err := api.GetFleet(ctx, fleet.Key{Cluster: parts[0], Namespace: parts[1], Name: parts[2]})
		if err != nil {
			return err
		}
		return printFleet(w, o, f)
	})
}

func getClusters(ctx context.Context, o *options, args []string, w io.Writer) error {
	return withAPI(ctx, o, func(ctx context.Context, api fleetapi.API) error {
		if len(args) == 1 {
			c, err := api.GetCluster(ctx, args[0])
			if err != nil {
				return err
			}
			return printClusters(w, o, []fleetapi.Cluster{c}, true)
		}
		clusters, err := api.ListClusters(ctx)
		if err != nil {
			return err
		}
		return printClusters(w, o, clusters.Items, false)
	})
}

func labelValues(ctx context.Context, o *options, key string, w io.Writer) error {
	return withAPI(ctx, o, func(ctx context.Context, api fleetapi.API) error {
		lv, err := api.LabelValues(ctx, key, o.includeStale)
		if err != nil {
			return flagError(err)
		}
		return printLabels(w, o, lv)
	})
}

func fleetParams(o options) url.Values {
	v := url.Values{}
	for _, c := range o.clusters {
		v.Add("cluster", c)
	}
	set := func(k, val string, ok bool) {
		if ok {
			v.Set(k, val)
		}
	}
	set("namespace", o.namespace, o.namespace != "")
	set("selector", o.selector, o.selector != "")
	set("includeStale", "true", o.includeStale)
	set("rolloutComplete", o.rolloutComplete, o.rolloutComplete != "")
	set("minReady", strconv.FormatInt(o.minReady, 10), o.minReady != 0)
	set("counter", o.counter, o.counter != "")
	set("minAvailable", strconv.FormatInt(o.minAvailable, 10), o.minAvailable != 0)
	set("list", o.list, o.list != "")
	set("minListAvailable", strconv.FormatInt(o.minListAvailable, 10), o.minListAvailable != 0)
	set("orderBy", o.sortBy, o.sortBy != "")
	return v
}

// newAPI returns where the commands read: the HTTP API, or Firestore
// through the same read model the API answers from.
func newAPI(ctx context.Context, o options) (fleetapi.API, func(), error) {
	if o.api != "" {
		hc, err := fleetclient.NewHTTPClient(ctx, o.api, o.auth())
		if err != nil {
			return nil, nil, apiError(err)
		}
		c, err := fleetclient.New(hc, o.api, fleetclient.WithUserAgent("fleetcast-cli"))
		if err != nil {
			return nil, nil, apiError(err)
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

// auth is how the CLI gets ID tokens for --api.
func (o options) auth() fleetclient.Auth {
	return fleetclient.Auth{ImpersonateServiceAccount: o.impersonate}
}

// apiError is a failure to set up the --api client: a bad URL is bad
// input; credentials that cannot get an ID token are not.
func apiError(err error) error {
	if errors.Is(err, fleetclient.ErrInvalidURL) {
		return usagef("--api: %w", err)
	}
	return fmt.Errorf("--api: %w", err)
}

func firestoreClient(ctx context.Context, o options) (*firestore.Client, error) {
	if o.impersonate != "" {
		return nil, usagef("--impersonate-service-account applies to --api only; for Firestore, use gcloud auth application-default login --impersonate-service-account")
	}
	if o.project == "" {
		return nil, usagef("no project: set --project or GOOGLE_CLOUD_PROJECT (or --api)")
	}
	c, err := firestore.NewClientWithDatabase(ctx, o.project, o.database)
	if err != nil {
		return nil, fmt.Errorf("firestore: %w", err)
	}
	return c, nil
}

// flagNames name the flag behind each query parameter.
var flagNames = map[string]string{
	"selector": "-l", "namespace": "-n", "cluster": "--cluster", "key": "KEY", "minReady": "--min-ready",
	"counter": "--counter", "minAvailable": "--min-available", "list": "--list", "minListAvailable": "--min-list-available",
	"orderBy": "--sort-by", "includeStale": "--include-stale", "rolloutComplete": "--rollout-complete",
}

// flagError names the flag behind a bad query parameter.
func flagError(err error) error {
	if e, ok := errors.AsType[*fleetapi.Error](err); ok && e.Code == fleetapi.InvalidArgument {
		if name := flagNames[e.Param]; name != "" {
			return usagef("%s: %s", name, e.Message)
		}
		return usageError{err}
	}
	return err
}

// printObject prints v as JSON, YAML or a JSONPath template's result;
// ok is false for the other formats.
func printObject(w io.Writer, format string, v any) (ok bool, err error) {
	switch {
	case format == "json", format == "yaml":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return true, err
			}
			_, err = w.Write(b)
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case strings.HasPrefix(format, "jsonpath="):
		return true, printJSONPath(w, strings.TrimPrefix(format, "jsonpath="), v)
	}
	return false, nil
}

// printJSONPath prints v through a kubectl JSONPath template, e.g.
// {.items[*].name} or {range .items[*]}{.name}{"\n"}{end}.
func printJSONPath(w io.Writer, template string, v any) error {
	if !strings.Contains(template, "{") {
		template = "{" + template + "}"
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(template); err != nil {
		return usagef("-o jsonpath: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return err
	}
	if err := jp.Execute(w, data); err != nil {
		return usagef("-o jsonpath: %w", err)
	}
	return nil // as kubectl: no newline of its own
}

func printFleets(w io.Writer, o *options, fleets []fleetapi.Fleet) error {
	if ok, err := printObject(w, o.output, map[string]any{"items": nonNilSlice(fleets)}); ok {
		return err
	}
	if o.output == "name" {
		for _, f := range fleets {
			fmt.Fprintf(w, "fleet/%s/%s/%s\n", f.Cluster, f.Namespace, f.Name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if !o.noHeaders {
		fmt.Fprintln(tw, fleetHeader(o.output == "wide"))
	}
	for _, f := range fleets {
		fmt.Fprintln(tw, fleetRow(f, o.output == "wide"))
	}
	return tw.Flush()
}

func printFleet(w io.Writer, o *options, f fleetapi.Fleet) error {
	if ok, err := printObject(w, o.output, f); ok {
		return err
	}
	return printFleets(w, o, []fleetapi.Fleet{f})
}

func fleetHeader(wide bool) string {
	header := "CLUSTER\tNAMESPACE\tNAME\tREADY\tALLOCATED\tREPLICAS\tLAG\tSTALE"
	if wide {
		header += "\tROLLOUT\tCOUNTERS\tLABELS\tDEGRADED"
	}
	return header
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
		row += "\t" + rolloutText(f) + "\t" + orNone(strings.Join(counters, ",")) + "\t" + orNone(strings.Join(ls, ",")) + "\t" + orNone(f.Degraded)
	}
	return row
}

// rolloutText is a fleet's rollout in one word or a few: complete; rolling
// with the current set's running game servers against the desired
// replicas, and how many the old sets still run; <none> while unknown.
func rolloutText(f fleetapi.Fleet) string {
	if f.Rollout == nil {
		return orNone("")
	}
	if f.Rollout.Complete {
		return "complete"
	}
	var running, old int64
	for _, s := range f.Rollout.Sets {
		if s.Current {
			running = fleet.SatAdd(fleet.SatAdd(s.ReadyReplicas, s.ReservedReplicas), s.AllocatedReplicas)
		} else {
			old = fleet.SatAdd(old, s.Replicas)
		}
	}
	return fmt.Sprintf("rolling:%d/%d,old=%d", running, f.Replicas, old)
}

func printClusters(w io.Writer, o *options, clusters []fleetapi.Cluster, one bool) error {
	var v any = map[string]any{"items": nonNilSlice(clusters)}
	if one {
		v = clusters[0]
	}
	if ok, err := printObject(w, o.output, v); ok {
		return err
	}
	if o.output == "name" {
		for _, c := range clusters {
			fmt.Fprintf(w, "cluster/%s\n", c.Cluster)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if !o.noHeaders {
		fmt.Fprintln(tw, "CLUSTER\tFLEETS\tREADY\tALLOCATED\tHEARTBEAT\tSTALE\tPUBLISHER\tLABELS")
	}
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

func printLabels(w io.Writer, o *options, lv fleetapi.LabelValues) error {
	if ok, err := printObject(w, o.output, lv); ok {
		return err
	}
	if o.output == "name" {
		for _, v := range lv.Values {
			fmt.Fprintln(w, v.Value)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if !o.noHeaders {
		fmt.Fprintf(tw, "%s\tFLEETS\tREADY\tALLOCATED\tCLUSTERS\n", strings.ToUpper(lv.Key))
	}
	for _, v := range lv.Values {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", orNone(v.Value), v.Fleets, v.ReadyReplicas, v.AllocatedReplicas, strings.Join(v.Clusters, ","))
	}
	return tw.Flush()
}

// watch prints the matching fleets, then a row (or, with -o json, an
// object) for every change, like kubectl get -w, until ctx ends. It gives
// up when no view comes within --request-timeout, says on stderr when
// its source fails and it retries, and ends with an error when the watch
// does.
func watch(ctx context.Context, o *options, w, errOut io.Writer) error {
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return usagef("-l: %w", err)
	}
	if o.minReady != 0 || o.counter != "" || o.list != "" || o.sortBy != "" && o.sortBy != "name" {
		return usagef("-w: --min-ready, --counter, --list and --sort-by do not apply to a watch; filter with -l, -n and --cluster")
	}
	if slices.Contains([]string{"yaml"}, o.output) || strings.HasPrefix(o.output, "jsonpath=") {
		return usagef("-o %s: a watch prints table, wide, json or name", o.output)
	}
	// From the query API's stream, or from Firestore's listeners.
	start := func(opts fleetwatch.Options) (*fleetwatch.View, error) {
		base, err := fleetclient.ParseBaseURL(o.api)
		if err != nil {
			return nil, apiError(err)
		}
		hc, err := fleetclient.NewHTTPClient(ctx, base, o.auth())
		if err != nil {
			return nil, apiError(err)
		}
		return fleetwatch.WatchAPI(ctx, fleetcastv1connect.NewInformationServiceClient(hc, base), opts)
	}
	if o.api == "" {
		client, err := firestoreClient(ctx, *o)
		if err != nil {
			return err
		}
		defer client.Close()
		start = func(opts fleetwatch.Options) (*fleetwatch.View, error) { return fleetwatch.Watch(ctx, client, opts) }
	}
	var mu sync.Mutex // the initial table is printed before any change
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	wide := o.output == "wide"
	show := func(change string, f fleetapi.Fleet) {
		if !sel.Matches(labels.Set(f.Labels)) || o.namespace != "" && f.Namespace != o.namespace || f.Stale && !o.includeStale {
			return
		}
		switch o.output {
		case "json":
			b, _ := json.Marshal(map[string]any{"type": change, "fleet": f})
			fmt.Fprintf(tw, "%s\n", b)
		case "name":
			fmt.Fprintf(tw, "%s\tfleet/%s/%s/%s\n", change, f.Cluster, f.Namespace, f.Name)
		default:
			fmt.Fprintf(tw, "%s\t%s\n", change, fleetRow(f, wide))
		}
	}
	// Held until the initial table is out: changes wait for it.
	mu.Lock()
	v, err := start(fleetwatch.Options{
		Clusters:     o.clusters,
		StaleAfter:   o.staleAfter,
		StartTimeout: o.requestTimeout,
		OnChange: func(c fleetwatch.Change) {
			mu.Lock()
			defer mu.Unlock()
			kind := strings.ToUpper(string(c.Kind))
			switch {
			case c.Cluster == "":
				show(kind, c.Fleet)
			case o.output == "json":
				b, _ := json.Marshal(map[string]any{"type": kind, "cluster": c.Cluster})
				fmt.Fprintf(tw, "%s\n", b)
			default: // a cluster turned stale or fresh
				fmt.Fprintf(tw, "%s\tcluster/%s\n", kind, c.Cluster)
			}
			_ = tw.Flush()
		},
		OnError:   func(err error) { fmt.Fprintf(errOut, "fleetcast watch: %v; retrying\n", err) },
		OnRecover: func(what string) { fmt.Fprintf(errOut, "fleetcast watch: %s reconnected\n", what) },
		Log:       slog.New(slog.DiscardHandler), // OnError says it
	})
	if err != nil {
		mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if !o.noHeaders && o.output != "json" && o.output != "name" {
		fmt.Fprintln(tw, "CHANGE\t"+fleetHeader(wide))
	}
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
