package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/publisher"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{
		"FLEETCAST_CLUSTER":            "pc-eu",
		"GOOGLE_CLOUD_PROJECT":         "proj",
		"FLEETCAST_MIN_INTERVAL":       "250ms",
		"FLEETCAST_NAMESPACES":         "games, beta",
		"FLEETCAST_LEADER_ELECT":       "false",
		"FLEETCAST_CLUSTER_LABELS":     "platform=pc,region=eu",
		"POD_NAME":                     "pub-7",
		"POD_NAMESPACE":                "fleetcast",
		"FLEETCAST_TRACE_SAMPLE_RATIO": "0.05",
		"FLEETCAST_ALLOCATOR_ENDPOINT": "34.1.2.3:443",
	}
	c, _, err := parseConfig([]string{"--min-interval=2s", "--labels-exclude=pod-template-hash,noisy/*"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "pc-eu", c.Cluster)
	assert.Equal(t, "proj", c.Project)
	assert.Equal(t, 2*time.Second, c.MinInterval, "a flag wins over its variable")
	assert.Equal(t, []string{"games", "beta"}, c.Namespaces)
	assert.False(t, c.LeaderElect)
	assert.Equal(t, map[string]string{"platform": "pc", "region": "eu"}, c.ClusterLabels)
	assert.Equal(t, "pub-7", c.ID)
	assert.Equal(t, "fleetcast", c.LeaseNamespace)
	assert.Equal(t, []string{"pod-template-hash", "noisy/*"}, c.Projection.ExcludeLabels)
	assert.Equal(t, 30*time.Second, c.SnapshotInterval)
	assert.Equal(t, "fleet-events-pc-eu", c.Topic, "each cluster its own topic")
	assert.Equal(t, 0.05, c.TraceSampleRatio)
	assert.Equal(t, "34.1.2.3:443", c.AllocatorEndpoint)
}

func TestParseConfigErrorsNameTheSetting(t *testing.T) {
	base := map[string]string{"FLEETCAST_CLUSTER": "pc", "GOOGLE_CLOUD_PROJECT": "p"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"missing cluster", nil, map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}, "--cluster: is required"},
		{"invalid cluster", []string{"--cluster=PC_1"}, base, "--cluster"},
		{"missing project", nil, map[string]string{"FLEETCAST_CLUSTER": "pc"}, "--project (or GOOGLE_CLOUD_PROJECT): is required"},
		{"bad duration variable", nil, map[string]string{"FLEETCAST_CLUSTER": "pc", "GOOGLE_CLOUD_PROJECT": "p", "FLEETCAST_MIN_INTERVAL": "soon"}, "FLEETCAST_MIN_INTERVAL"},
		{"zero interval", []string{"--snapshot-interval=0s"}, base, "--snapshot-interval"},
		{"renew after lease", []string{"--renew-deadline=20s"}, base, "--renew-deadline"},
		{"bad selector", []string{"--label-selector=a in (b"}, base, "--label-selector"},
		{"bad cluster labels", []string{"--cluster-labels=platform"}, base, "--cluster-labels"},
		{"bad allocator endpoint", []string{"--allocator-endpoint=https://34.1.2.3"}, base, "--allocator-endpoint: "},
		{"bad boolean", nil, map[string]string{"FLEETCAST_CLUSTER": "pc", "GOOGLE_CLOUD_PROJECT": "p", "FLEETCAST_LEADER_ELECT": "maybe"}, "FLEETCAST_LEADER_ELECT"},
		{"stray argument", []string{"extra"}, base, "unexpected arguments"},
		{"bad duration flag", []string{"--lease-duration=long"}, base, "--lease-duration"},
		{"bad log level", []string{"--log-level=LOUD"}, base, "--log-level"},
		{"ratio above 1", []string{"--trace-sample-ratio=5"}, base, "--trace-sample-ratio"},
		{"ratio not a number", nil, map[string]string{"FLEETCAST_CLUSTER": "pc", "GOOGLE_CLOUD_PROJECT": "p", "FLEETCAST_TRACE_SAMPLE_RATIO": "NaN"}, "FLEETCAST_TRACE_SAMPLE_RATIO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestParseConfigReportsEveryError: each setting that is wrong is named,
// not only the first.
func TestParseConfigReportsEveryError(t *testing.T) {
	env := map[string]string{"FLEETCAST_MIN_INTERVAL": "soon", "FLEETCAST_LEADER_ELECT": "maybe"}
	_, _, err := parseConfig([]string{"--snapshot-interval=0s", "--cluster-labels=platform"}, func(k string) string { return env[k] }, io.Discard)
	require.Error(t, err)
	for _, want := range []string{"FLEETCAST_MIN_INTERVAL", "FLEETCAST_LEADER_ELECT", "--snapshot-interval", "--cluster-labels", "--cluster: is required", "--project"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestDefaultsAreTheLibrarys: what no flag or variable sets is
// publisher.DefaultConfig's.
func TestDefaultsAreTheLibrarys(t *testing.T) {
	env := map[string]string{"FLEETCAST_CLUSTER": "pc", "GOOGLE_CLOUD_PROJECT": "p", "POD_NAME": "pod-1"}
	c, printConfig, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.False(t, printConfig)
	want := publisher.DefaultConfig()
	want.Cluster, want.Project, want.ID, want.Topic = "pc", "p", "pod-1", "fleet-events-pc"
	assert.Equal(t, want, c)
}
