package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// placeCmd are the place command's flags.
type placeCmd struct {
	g *global
	filters
	minReady, gameServers, players int64
	counter, list, rolloutComplete string
	count                          int
	policy                         []string
	out                            output
}

const placeLong = `Ask where a match can go now: the fleets that can take it, best first, each with its
cluster's allocator endpoint, and why the other fleets cannot.

Candidates come from the policy's lowest priority that has any; within a priority they are drawn
at random, each fleet's chance proportional to its cluster's weight times its available capacity,
so that ask twice and the order may differ: that is what spreads independent matchmakers' matches.
With no candidate, the reasons are printed and the exit code is 3.`

func newPlace(g *global, stdout io.Writer) *cobra.Command {
	c := &placeCmd{g: g}
	cmd := &cobra.Command{
		Use:   "place",
		Short: "Ask where a match can go now, best first",
		Long:  placeLong,
		Example: `  fleetcast place -l platform=pc --counter rooms=4
  fleetcast place -l version=1.42 --count 3 --policy region=europe-west1:0:100 --policy :1
  fleetcast place --game-servers 2 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.run(cmd.Context(), stdout) },
	}
	c.flags(cmd, 1, "how many candidates to print, best first")
	outputFlag(cmd, &c.out, append([]string{"table", "wide", "json", "yaml", "name"}, templated...)...)
	return cmd
}

// flags adds what a match needs, the filters, --count (count by default,
// with countUsage) and --policy: place's flags, and allocate's.
func (c *placeCmd) flags(cmd *cobra.Command, count int, countUsage string) {
	c.filters.flags(cmd)
	f := cmd.Flags()
	f.Int64Var(&c.minReady, "min-ready", 0, "only fleets with at least this many ready game servers (a filter: others are left out as FILTERED_OUT)")
	f.Int64Var(&c.gameServers, "game-servers", 0, "the match needs this many ready game servers (at least 1 when it needs no counter, list or players)")
	f.Int64Var(&c.players, "players", 0, "the match needs this much player capacity available")
	f.StringVar(&c.counter, "counter", "", "NAME[=AMOUNT]: the match needs AMOUNT (1 when left out) available in the counter, which weighs the draw")
	f.StringVar(&c.list, "list", "", "NAME[=AMOUNT]: the match needs AMOUNT (1 when left out) available in the list")
	f.StringVar(&c.rolloutComplete, "rollout-complete", "", "true: only fleets whose rollout is complete; false: only those rolling out")
	f.IntVar(&c.count, "count", count, fmt.Sprintf("%s (1 to %d)", countUsage, fleetapi.MaxPlacements))
	f.StringArrayVar(&c.policy, "policy", nil, "a policy rule SELECTOR:PRIORITY[:WEIGHT] over cluster labels, in order (repeatable); replaces the service's default")
}

// placeFlags name the flag behind each /v1/placements parameter.
var placeFlags = map[string]string{
	"counter": "--counter", "minAvailable": "--counter", "list": "--list", "minListAvailable": "--list", "count": "--count",
	"gameServers": "--game-servers", "players": "--players", "policy": "--policy",
}

func (c *placeCmd) run(ctx context.Context, w io.Writer) error {
	v, err := c.params()
	if err != nil {
		return err
	}
	req, err := fleetapi.ParsePlace(v)
	if err != nil {
		return placeFlagError(err)
	}
	return withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		p, err := api.Place(ctx, req)
		if err != nil {
			return placeFlagError(err)
		}
		if err := printPlacements(w, c.out, p); err != nil {
			return err
		}
		if len(p.Placements) == 0 {
			return noPlacement(p)
		}
		return nil
	})
}

// noPlacement is the NotFound error of an answer without candidates: its
// reasons, in one line.
func noPlacement(p fleetapi.Placements) error {
	var why []string
	for _, l := range p.LeftOut {
		why = append(why, l.Message)
	}
	if len(why) == 0 {
		why = append(why, "no fleet has reported")
	}
	return &fleetapi.Error{Code: fleetapi.NotFound, Message: "no fleet can take the match: " + strings.Join(why, "; ")}
}

func placeFlagError(err error) error {
	if e, ok := errors.AsType[*fleetapi.Error](err); ok && e.Code == fleetapi.InvalidArgument && placeFlags[e.Param] != "" {
		return usagef("%s: %s", placeFlags[e.Param], e.Message)
	}
	return flagError(err)
}

// params are the flags as the parameters of /v1/placements, which the read
// model parses and checks as the API does.
func (c *placeCmd) params() (url.Values, error) {
	v := (&getFleets{filters: c.filters, minReady: c.minReady, rolloutComplete: c.rolloutComplete}).params()
	for _, k := range []struct{ flag, value, key, amount string }{
		{"--counter", c.counter, "counter", "minAvailable"}, {"--list", c.list, "list", "minListAvailable"},
	} {
		if k.value == "" {
			continue
		}
		name, amount, given := strings.Cut(k.value, "=")
		if given {
			if n, err := strconv.ParseInt(amount, 10, 64); err != nil || n < 1 {
				return nil, usagef("%s %s: want NAME or NAME=AMOUNT, AMOUNT an integer of 1 or more", k.flag, k.value)
			}
			v.Set(k.amount, amount)
		}
		v.Set(k.key, name)
	}
	v.Set("count", strconv.Itoa(c.count))
	if c.gameServers != 0 {
		v.Set("gameServers", strconv.FormatInt(c.gameServers, 10))
	}
	if c.players != 0 {
		v.Set("players", strconv.FormatInt(c.players, 10))
	}
	if len(c.policy) > 0 {
		v["policy"] = c.policy
	}
	return v, nil
}

// printPlacements prints p as out says.
func printPlacements(w io.Writer, out output, p fleetapi.Placements) error {
	if ok, err := printObject(w, out, p); ok {
		return err
	}
	if out.format == "name" {
		for _, c := range p.Placements {
			fmt.Fprintf(w, "fleet/%s/%s/%s\n", c.Cluster, c.Namespace, c.Name)
		}
		return nil
	}
	if len(p.Placements) == 0 {
		return nil
	}
	var rows [][]string
	if !out.noHeaders {
		header := []string{"RANK", "CLUSTER", "NAMESPACE", "NAME", "AVAILABLE", "PRIORITY", "ALLOCATOR"}
		if out.wide() {
			header = append(header, "READY", "WEIGHT", "LAG", "HEARD", "STALE")
		}
		rows = append(rows, header)
	}
	for i, c := range p.Placements {
		row := []string{strconv.Itoa(i + 1), c.Cluster, c.Namespace, c.Name, fmt.Sprintf("%d %s", c.Available, c.Resource),
			strconv.Itoa(int(c.Priority)), orNone(c.AllocatorEndpoint)}
		if out.wide() {
			row = append(row, strconv.FormatInt(c.ReadyReplicas, 10), strconv.Itoa(int(c.Weight)), fmt.Sprintf("%dms", c.LagMillis),
				fmt.Sprintf("%.1fs ago", float64(c.HeartbeatAgeMillis)/1000), strconv.FormatBool(c.Stale))
		}
		rows = append(rows, row)
	}
	(&table{w: w}).rows(rows)
	return nil
}
