package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// labelsCmd are the labels command's flags.
type labelsCmd struct {
	g            *global
	includeStale bool
	out          output
}

func newLabels(g *global, stdout io.Writer) *cobra.Command {
	c := &labelsCmd{g: g}
	cmd := &cobra.Command{
		Use:     "labels KEY",
		Short:   "Sum the live fleets by the values of a label",
		Example: "  fleetcast labels version",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("labels takes one label key, e.g. fleetcast labels version")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return c.run(cmd.Context(), args[0], stdout) },
	}
	cmd.Flags().BoolVar(&c.includeStale, "include-stale", false, "include fleets of stale clusters")
	outputFlag(cmd, &c.out, append([]string{"table", "json", "yaml", "name"}, templated...)...)
	return cmd
}

func (c *labelsCmd) run(ctx context.Context, key string, w io.Writer) error {
	return withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		lv, err := api.LabelValues(ctx, key, c.includeStale)
		if err != nil {
			return flagError(err)
		}
		return printLabels(w, c.out, lv)
	})
}

func printLabels(w io.Writer, out output, lv fleetapi.LabelValues) error {
	if ok, err := printObject(w, out, lv); ok {
		return err
	}
	if out.format == "name" {
		for _, v := range lv.Values {
			fmt.Fprintln(w, v.Value)
		}
		return nil
	}
	var rows [][]string
	if !out.noHeaders {
		rows = append(rows, []string{strings.ToUpper(lv.Key), "FLEETS", "READY", "ALLOCATED", "CLUSTERS"})
	}
	for _, v := range lv.Values {
		rows = append(rows, []string{orNone(v.Value), fmt.Sprint(v.Fleets), fmt.Sprint(v.ReadyReplicas), fmt.Sprint(v.AllocatedReplicas), strings.Join(v.Clusters, ",")})
	}
	(&table{w: w}).rows(rows)
	return nil
}
