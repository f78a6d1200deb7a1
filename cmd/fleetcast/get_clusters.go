package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// getClusters are get clusters' flags.
type getClusters struct {
	g   *global
	out output
}

func newGetClusters(g *global, stdout io.Writer) *cobra.Command {
	c := &getClusters{g: g}
	cmd := &cobra.Command{
		Use:     "clusters [NAME]",
		Aliases: []string{"cluster"},
		Short:   "List the clusters, or show one",
		Example: "  fleetcast get clusters -o wide\n  fleetcast get cluster eu-west -o yaml",
		Args:    cobra.MaximumNArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return c.run(cmd.Context(), args, stdout) },
	}
	outputFlag(cmd, &c.out, append([]string{"table", "wide", "json", "yaml", "name"}, templated...)...)
	return cmd
}

func (c *getClusters) run(ctx context.Context, args []string, w io.Writer) error {
	return withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		if len(args) == 1 {
			cl, err := api.GetCluster(ctx, args[0])
			if err != nil {
				return err
			}
			if ok, err := printObject(w, c.out, cl); ok {
				return err
			}
			return printClusters(w, c.out, c.g.now(), []fleetapi.Cluster{cl})
		}
		list, err := api.ListClusters(ctx)
		if err != nil {
			return err
		}
		if ok, err := printObject(w, c.out, map[string]any{"items": nonNilSlice(list.Items)}); ok {
			return err
		}
		return printClusters(w, c.out, c.g.now(), list.Items)
	})
}

// printClusters prints clusters as names or a table, HEARTBEAT the age of
// the last heartbeat as of now; -o wide adds the publisher's version, the
// game servers they run and their capacity.
func printClusters(w io.Writer, out output, now time.Time, clusters []fleetapi.Cluster) error {
	if out.format == "name" {
		for _, c := range clusters {
			fmt.Fprintf(w, "cluster/%s\n", c.Cluster)
		}
		return nil
	}
	var rows [][]string
	if !out.noHeaders {
		header := []string{"CLUSTER", "FLEETS", "READY", "ALLOCATED", "HEARTBEAT", "STALE", "PUBLISHER", "LABELS"}
		if out.wide() {
			header = append(header, "VERSION", "REPLICAS", "PLAYERS", "COUNTERS")
		}
		rows = append(rows, header)
	}
	for _, c := range clusters {
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			ls = append(ls, k+"="+c.Labels[k])
		}
		row := []string{c.Cluster, fmt.Sprint(c.FleetCount), fmt.Sprint(c.Totals.ReadyReplicas), fmt.Sprint(c.Totals.AllocatedReplicas),
			age(now, c.HeartbeatAt), fmt.Sprint(c.Stale), c.Publisher.ID, orNone(strings.Join(ls, ","))}
		if out.wide() {
			var counters []string
			for _, k := range slices.Sorted(maps.Keys(c.Totals.Counters)) {
				a := c.Totals.Counters[k]
				counters = append(counters, fmt.Sprintf("%s=%d/%d", k, a.Available, a.Capacity))
			}
			row = append(row, orNone(c.Publisher.Version), fmt.Sprint(c.Totals.Replicas),
				fmt.Sprintf("%d/%d", c.Totals.Players.Count, c.Totals.Players.Capacity), orNone(strings.Join(counters, ",")))
		}
		rows = append(rows, row)
	}
	(&table{w: w}).rows(rows)
	return nil
}
