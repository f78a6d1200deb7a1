package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
)

// watch are a watch's flags: get fleets -w, or the watch command.
type watch struct {
	g *global
	filters
	out output
}

func newWatch(g *global, stdout, stderr io.Writer) *cobra.Command {
	c := &watch{g: g}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the fleets, then a row for every change (get fleets -w)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return c.run(cmd.Context(), stdout, stderr) },
	}
	c.filters.flags(cmd)
	outputFlag(cmd, &c.out, "table", "wide", "json", "name")
	return cmd
}

// eventTypes are kubectl's watch event types for the view's changes; a
// cluster turning stale or fresh keeps its own.
var eventTypes = map[fleetwatch.ChangeKind]string{
	fleetwatch.Added: "ADDED", fleetwatch.Modified: "MODIFIED", fleetwatch.Removed: "DELETED",
	fleetwatch.ClusterStale: "CLUSTERSTALE", fleetwatch.ClusterFresh: "CLUSTERFRESH",
}

// run prints the matching fleets, then a row (or, with -o json, a
// kubectl watch event: {"type":"ADDED","object":…}) for every change,
// like kubectl get -w, until ctx ends. It gives up when no view comes
// within --request-timeout, says on stderr when its source fails and it
// retries, and ends with an error when the watch does.
func (c *watch) run(ctx context.Context, w, errOut io.Writer) error {
	sel, err := labels.Parse(c.selector)
	if err != nil {
		return usagef("-l: %w", err)
	}
	if c.out.format != "table" && c.out.format != "wide" && c.out.format != "json" && c.out.format != "name" {
		return usagef("-o %s: a watch prints table, wide, json or name", c.out.format)
	}
	start, stop, err := c.source(ctx)
	if err != nil {
		return err
	}
	defer stop()
	var mu sync.Mutex // the initial table is printed before any change
	// The change column is as wide as its widest word from the start, so
	// that every later row stays under the header.
	tbl := &table{w: w, widths: []int{len("CLUSTERSTALE")}}
	keep := func(f fleetapi.Fleet) bool {
		return sel.Matches(labels.Set(f.Labels)) && (c.namespace == "" || f.Namespace == c.namespace) && (!f.Stale || c.includeStale)
	}
	show := func(change string, f fleetapi.Fleet) {
		if !keep(f) {
			return
		}
		switch c.out.format {
		case "json":
			b, _ := json.Marshal(map[string]any{"type": change, "object": f})
			fmt.Fprintf(w, "%s\n", b)
		case "name":
			tbl.row(change, fmt.Sprintf("fleet/%s/%s/%s", f.Cluster, f.Namespace, f.Name))
		default:
			tbl.row(append([]string{change}, fleetRow(f, c.g.now(), c.out.wide())...)...)
		}
	}
	// Held until the initial table is out: changes wait for it.
	mu.Lock()
	v, err := start(fleetwatch.Options{
		Clusters:     c.clusters,
		StaleAfter:   c.g.staleAfter,
		StartTimeout: c.g.requestTimeout,
		OnChange: func(ch fleetwatch.Change) {
			mu.Lock()
			defer mu.Unlock()
			kind := eventTypes[ch.Kind]
			switch {
			case ch.Cluster == "":
				show(kind, ch.Fleet)
			case c.out.format == "json":
				b, _ := json.Marshal(map[string]any{"type": kind, "object": map[string]string{"cluster": ch.Cluster}})
				fmt.Fprintf(w, "%s\n", b)
			default: // a cluster turned stale or fresh
				tbl.row(kind, "cluster/"+ch.Cluster)
			}
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
	c.initial(tbl, v.Fleets(sel), keep, show)
	mu.Unlock()
	<-v.Done()
	if ctx.Err() != nil {
		return nil
	}
	return v.Err()
}

// initial prints the header and the fleets the watch starts from: rows
// of change "-", their columns as wide as the widest; in JSON, as kubectl
// does, ADDED events.
func (c *watch) initial(tbl *table, fleets []fleetapi.Fleet, keep func(fleetapi.Fleet) bool, show func(string, fleetapi.Fleet)) {
	if c.out.format == "json" || c.out.format == "name" {
		change := "-"
		if c.out.format == "json" {
			change = "ADDED" // kubectl's watch events start so
		}
		for _, f := range fleets {
			show(change, f)
		}
		return
	}
	var rows [][]string
	if !c.out.noHeaders {
		rows = append(rows, append([]string{"CHANGE"}, fleetHeader(c.out.wide())...))
	}
	for _, f := range fleets {
		if keep(f) {
			rows = append(rows, append([]string{"-"}, fleetRow(f, c.g.now(), c.out.wide())...))
		}
	}
	tbl.rows(rows)
}

// source is where the watch reads: the query API's stream (--api), or
// Firestore's listeners.
func (c *watch) source(ctx context.Context) (func(fleetwatch.Options) (*fleetwatch.View, error), func(), error) {
	if c.g.api != "" {
		api, err := apiClient(ctx, c.g) // the client get uses: one protocol
		if err != nil {
			return nil, nil, err
		}
		return func(o fleetwatch.Options) (*fleetwatch.View, error) {
			return fleetwatch.WatchAPI(ctx, api.InformationService(), o)
		}, func() {}, nil
	}
	client, err := firestoreClient(ctx, c.g)
	if err != nil {
		return nil, nil, err
	}
	return func(o fleetwatch.Options) (*fleetwatch.View, error) { return fleetwatch.Watch(ctx, client, o) },
		func() { _ = client.Close() }, nil
}
