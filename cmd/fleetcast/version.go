package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/version"
)

// versions is what fleetcast version -o json|yaml prints, as kubectl
// version does: the client's build, and with --api the server's.
type versions struct {
	Client version.Info  `json:"clientVersion"`
	Server *version.Info `json:"serverVersion,omitempty"`
}

func newVersion(g *global, stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print fleetcast's version, and with --api the query API's",
		Long: `Print fleetcast's version; with --api, the query API's too (GET /v1/version), as kubectl
version prints the client's and the server's. -o json or -o yaml prints both as
{"clientVersion": …, "serverVersion": …}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return usagef("-o %q: want json or yaml", output)
			}
			v := versions{Client: version.Get("fleetcast")}
			var serverErr error
			if g.api != "" {
				serverErr = withAPI(cmd.Context(), g, func(ctx context.Context, api fleetapi.API) error {
					src, ok := api.(versioned)
					if !ok {
						return fmt.Errorf("--api: %T cannot say its version", api)
					}
					s, err := src.ServerVersion(ctx)
					if err == nil {
						v.Server = &s
					}
					return err
				})
			}
			// As kubectl version: the client's, even when the server
			// does not answer.
			if err := printVersions(stdout, v, output); err != nil {
				return err
			}
			return serverErr
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml; a line per program when left out")
	return cmd
}

// versioned is the --api source, which can say the server's version.
type versioned interface {
	ServerVersion(context.Context) (version.Info, error)
}

func printVersions(w io.Writer, v versions, output string) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if _, err := fmt.Fprintln(w, v.Client); err != nil {
		return err
	}
	if v.Server != nil {
		_, err := fmt.Fprintf(w, "server: %s\n", v.Server)
		return err
	}
	return nil
}
