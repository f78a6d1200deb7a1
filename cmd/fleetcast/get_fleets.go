package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// filters are the fleet commands' filters, watches included.
type filters struct {
	selector, namespace string
	clusters            []string
	includeStale        bool
}

func (f *filters) flags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(&f.selector, "selector", "l", "", "label selector, e.g. platform=pc,version in (1.42,1.43)")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "only fleets of this namespace")
	fs.StringSliceVar(&f.clusters, "cluster", nil, "only fleets of these clusters (repeatable, or comma-separated)")
	fs.BoolVar(&f.includeStale, "include-stale", false, "include fleets of stale clusters (marked)")
}

// getFleets are get fleets' flags: filters, thresholds, order, output.
type getFleets struct {
	g *global
	filters
	minReady, minAvailable, minListAvailable int64
	counter, list, sortBy, rolloutComplete   string
	watch                                    bool
	out                                      output
}

func newGetFleets(g *global, stdout, stderr io.Writer) *cobra.Command {
	c := &getFleets{g: g}
	cmd := &cobra.Command{
		Use:     "fleets [CLUSTER/NAMESPACE/NAME]",
		Aliases: []string{"fleet"},
		Short:   "List the fleets, or show one",
		Example: `  fleetcast get fleets -l platform=ps5,version=1.42 --min-ready 1 --sort-by ready
  fleetcast get fleets --counter rooms --min-available 5 -o wide
  fleetcast get fleet eu-west/games-eu-west/ps5-v1-42 -o yaml
  fleetcast get fleets -w`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1:
				return c.one(cmd.Context(), args[0], stdout)
			case c.watch:
				if c.minReady != 0 || c.counter != "" || c.list != "" || c.sortBy != "" && c.sortBy != "name" {
					return usagef("-w: --min-ready, --counter, --list and --sort-by do not apply to a watch; filter with -l, -n and --cluster")
				}
				return (&watch{g: g, filters: c.filters, out: c.out}).run(cmd.Context(), stdout, stderr)
			}
			return c.all(cmd.Context(), stdout)
		},
	}
	c.filters.flags(cmd)
	f := cmd.Flags()
	f.Int64Var(&c.minReady, "min-ready", 0, "only fleets with at least this many ready game servers")
	f.StringVar(&c.counter, "counter", "", "a counter, for --min-available and --sort-by available")
	f.Int64Var(&c.minAvailable, "min-available", 0, "only fleets whose --counter has at least this much available capacity")
	f.StringVar(&c.list, "list", "", "a list, for --min-list-available and --sort-by available")
	f.Int64Var(&c.minListAvailable, "min-list-available", 0, "only fleets whose --list has at least this much available capacity")
	f.StringVar(&c.rolloutComplete, "rollout-complete", "", "true: only fleets whose rollout is complete; false: only those whose rollout is in progress (a fleet whose rollout is unknown matches neither)")
	f.StringVar(&c.sortBy, "sort-by", "name", "order: name (cluster, namespace, name), ready (most first) or available (of --counter or --list, most first)")
	f.BoolVarP(&c.watch, "watch", "w", false, "after the list, print a row for every change, until interrupted")
	outputFlag(cmd, &c.out, append([]string{"table", "wide", "json", "yaml", "name"}, templated...)...)
	return cmd
}

func (c *getFleets) all(ctx context.Context, w io.Writer) error {
	q, err := fleetapi.ParseQuery(c.params())
	if err != nil {
		return flagError(err)
	}
	return withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		fleets, err := fleetapi.AllFleets(ctx, api, q)
		if err != nil {
			return flagError(err)
		}
		return printFleets(w, c.out, c.g.now(), fleets)
	})
}

func (c *getFleets) one(ctx context.Context, arg string, w io.Writer) error {
	parts := strings.Split(arg, "/")
	if len(parts) != 3 {
		return usagef("fleet %q: want CLUSTER/NAMESPACE/NAME, e.g. pc/games/ranked", arg)
	}
	return withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		f, err := api.GetFleet(ctx, fleet.Key{Cluster: parts[0], Namespace: parts[1], Name: parts[2]})
		if err != nil {
			return err
		}
		if ok, err := printObject(w, c.out, f); ok {
			return err
		}
		return printFleets(w, c.out, c.g.now(), []fleetapi.Fleet{f})
	})
}

// params are the flags as the query API's parameters, which the read
// model parses and checks as the API does.
func (c *getFleets) params() url.Values {
	v := url.Values{}
	for _, cl := range c.clusters {
		v.Add("cluster", cl)
	}
	set := func(k, val string, ok bool) {
		if ok {
			v.Set(k, val)
		}
	}
	set("namespace", c.namespace, c.namespace != "")
	set("selector", c.selector, c.selector != "")
	set("includeStale", "true", c.includeStale)
	set("rolloutComplete", c.rolloutComplete, c.rolloutComplete != "")
	set("minReady", strconv.FormatInt(c.minReady, 10), c.minReady != 0)
	set("counter", c.counter, c.counter != "")
	set("minAvailable", strconv.FormatInt(c.minAvailable, 10), c.minAvailable != 0)
	set("list", c.list, c.list != "")
	set("minListAvailable", strconv.FormatInt(c.minListAvailable, 10), c.minListAvailable != 0)
	set("orderBy", c.sortBy, c.sortBy != "")
	return v
}

// printFleets prints fleets as out says; a table's ages are as of now.
func printFleets(w io.Writer, out output, now time.Time, fleets []fleetapi.Fleet) error {
	if ok, err := printObject(w, out, map[string]any{"items": nonNilSlice(fleets)}); ok {
		return err
	}
	if out.format == "name" {
		for _, f := range fleets {
			fmt.Fprintf(w, "fleet/%s/%s/%s\n", f.Cluster, f.Namespace, f.Name)
		}
		return nil
	}
	var rows [][]string
	if !out.noHeaders {
		rows = append(rows, fleetHeader(out.wide()))
	}
	for _, f := range fleets {
		rows = append(rows, fleetRow(f, now, out.wide()))
	}
	(&table{w: w}).rows(rows)
	return nil
}

func fleetHeader(wide bool) []string {
	header := []string{"CLUSTER", "NAMESPACE", "NAME", "READY", "ALLOCATED", "REPLICAS", "LAG", "STALE", "UPDATED"}
	if wide {
		header = append(header, "ROLLOUT", "COUNTERS", "LABELS", "DEGRADED")
	}
	return header
}

// fleetRow is a fleet's row. UPDATED is how long ago its publisher
// observed the state it holds: the fleet has not changed since (a cluster's
// heartbeat says the publisher still runs).
func fleetRow(f fleetapi.Fleet, now time.Time, wide bool) []string {
	row := []string{f.Cluster, f.Namespace, f.Name, fmt.Sprint(f.ReadyReplicas), fmt.Sprint(f.AllocatedReplicas),
		fmt.Sprintf("%d/%d", f.CurrentReplicas, f.Replicas), (time.Duration(f.LagMillis) * time.Millisecond).String(), fmt.Sprint(f.Stale),
		age(now, f.ObservedAt)}
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
		row = append(row, rolloutText(f), orNone(strings.Join(counters, ",")), orNone(strings.Join(ls, ",")), orNone(f.Degraded))
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
