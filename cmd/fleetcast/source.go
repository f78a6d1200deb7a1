package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	vkit "cloud.google.com/go/firestore/apiv1"
	"golang.org/x/oauth2/google"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
)

// withAPI runs f with the source the flags name, within
// --request-timeout, and closes the source after.
func withAPI(ctx context.Context, g *global, f func(context.Context, fleetapi.API) error) error {
	cancel := context.CancelFunc(func() {})
	if g.requestTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, g.requestTimeout)
	}
	defer cancel()
	api, closeAPI, err := newAPI(ctx, g)
	if err != nil {
		return err
	}
	defer closeAPI()
	err = f(ctx, api)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return timedOut{err}
	}
	return err
}

// timedOut is an error of a request that --request-timeout ended: its
// message says so, where a refused connection's does not.
type timedOut struct{ error }

func (e timedOut) Unwrap() error { return e.error }

// newAPI returns where the commands read: the HTTP API, or Firestore
// through the same read model the API answers from.
func newAPI(ctx context.Context, g *global) (fleetapi.API, func(), error) {
	if g.api != "" {
		c, err := apiClient(ctx, g)
		if err != nil {
			return nil, nil, err
		}
		return c, func() {}, nil
	}
	client, err := firestoreClient(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	svc := fleetapi.NewService(firestoredb.New(client, fleet.DefaultTombstoneRetention, time.Now), fleetapi.Options{StaleAfter: g.staleAfter})
	return svc, func() { _ = client.Close() }, nil
}

// apiClient is the client of --api, whose ID tokens auth gets: get and
// watch speak its one protocol.
func apiClient(ctx context.Context, g *global) (*fleetclient.Client, error) {
	hc, err := fleetclient.NewHTTPClient(ctx, g.api, g.auth())
	if err != nil {
		return nil, apiError(err)
	}
	c, err := fleetclient.New(hc, g.api)
	if err != nil {
		return nil, apiError(err)
	}
	return c, nil
}

// auth is how the CLI gets ID tokens for --api.
func (g *global) auth() fleetclient.Auth {
	return fleetclient.Auth{ImpersonateServiceAccount: g.impersonate}
}

func firestoreClient(ctx context.Context, g *global) (*firestore.Client, error) {
	if g.impersonate != "" {
		return nil, usagef("--impersonate-service-account applies to --api only; for Firestore, use gcloud auth application-default login --impersonate-service-account")
	}
	if g.project == "" {
		g.project = gcloudProject(g.getenv)
	}
	if g.project == "" {
		return nil, usagef("no project: set --project or GOOGLE_CLOUD_PROJECT, or gcloud config set project (or --api)")
	}
	// Found first, as the client will find them, so that none is told
	// apart (exit 5) from a Firestore that does not answer. The emulator
	// takes none.
	if os.Getenv("FIRESTORE_EMULATOR_HOST") == "" {
		if _, err := google.FindDefaultCredentials(ctx, vkit.DefaultAuthScopes()...); err != nil {
			return nil, &fleetapi.Error{Code: fleetapi.PermissionDenied, Err: err,
				Message: "firestore: no credentials: run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS (or read through --api)"}
		}
	}
	c, err := firestore.NewClientWithDatabase(ctx, g.project, g.database)
	if err != nil {
		return nil, fmt.Errorf("firestore: %w", err)
	}
	return c, nil
}

// gcloudProject is the project gcloud is configured with, as gcloud
// itself resolves it: $CLOUDSDK_CORE_PROJECT, else the core/project
// property of the active configuration ($CLOUDSDK_ACTIVE_CONFIG_NAME, else
// the one named in active_config, else "default") in gcloud's
// configuration directory ($CLOUDSDK_CONFIG, else ~/.config/gcloud).
// Empty when gcloud has none. (No Go library reads gcloud's properties;
// running gcloud costs a second and needs it installed.)
func gcloudProject(getenv func(string) string) string {
	if p := getenv("CLOUDSDK_CORE_PROJECT"); p != "" {
		return p
	}
	dir := getenv("CLOUDSDK_CONFIG")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config", "gcloud")
	}
	name := getenv("CLOUDSDK_ACTIVE_CONFIG_NAME")
	if name == "" {
		b, _ := os.ReadFile(filepath.Join(dir, "active_config"))
		name = strings.TrimSpace(string(b))
	}
	if name == "" {
		name = "default"
	}
	f, err := os.Open(filepath.Join(dir, "configurations", "config_"+name))
	if err != nil {
		return ""
	}
	defer f.Close()
	section := ""
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.TrimSpace(line[1 : len(line)-1])
		case section == "core":
			if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "project" {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}
