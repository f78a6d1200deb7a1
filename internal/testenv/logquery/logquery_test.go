package logquery

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueryLanguage(t *testing.T) {
	e := FromStructuredLine([]byte(`{"severity":"ERROR","message":"dropping invalid fleet event","reasonCode":"invalid","lagMillis":42,`+
		`"logging.googleapis.com/trace":"projects/p/traces/abc","nested":{"a.b":"x"}}`),
		map[string]any{"type": "cloud_run_revision", "labels": map[string]any{"service_name": "fleetcast-ingest"}}, "projects/p/logs/run.googleapis.com%2Fstdout")
	assert.Equal(t, "ERROR", e["severity"], "severity leaves the payload")
	assert.Equal(t, "projects/p/traces/abc", e["trace"])
	assert.NotContains(t, e["jsonPayload"], "severity")
	assert.Contains(t, e["jsonPayload"], "message", "message stays in the payload")

	for q, want := range map[string]bool{
		`resource.type="cloud_run_revision"`:                                     true,
		`resource.type="CLOUD_RUN_REVISION"`:                                     true,  // strings ignore case
		`resource.type=~"^CLOUD"`:                                                false, // regular expressions do not
		`resource.type=~"^cloud_run"`:                                            true,
		`jsonPayload.reasonCode:*`:                                               true,
		`jsonPayload.outcome:*`:                                                  false,
		`NOT jsonPayload.outcome="created"`:                                      true, // a missing field compares false
		`-jsonPayload.reasonCode:*`:                                              false,
		`jsonPayload.message:"INVALID fleet"`:                                    true,
		`severity>=WARNING`:                                                      true,
		`severity>"ERROR"`:                                                       false,
		`jsonPayload.lagMillis>40 jsonPayload.lagMillis<=42`:                     true, // juxtaposition is AND
		`jsonPayload.lagMillis=42`:                                               true,
		`jsonPayload.reasonCode=("clock-skew" OR "invalid")`:                     true,
		`jsonPayload.reasonCode=("clock-skew" AND "invalid")`:                    false,
		`logName="projects/p/logs/run.googleapis.com%2Fstdout"`:                  true,
		`jsonPayload.reasonCode="invalid" AND (severity=INFO OR severity=ERROR)`: true,
		// OR binds tighter than AND: (true OR false) AND (false OR false).
		`severity=ERROR OR severity=INFO AND jsonPayload.outcome:* OR jsonPayload.x:*`: false,
		// NOT binds tightest: (NOT true) OR true.
		`NOT severity=ERROR OR resource.type="cloud_run_revision"`: true,
	} {
		f, err := Parse(q)
		require.NoError(t, err, q)
		assert.Equal(t, want, f.Match(e), q)
	}
	for _, q := range []string{`"bare value"`, `severity!=ERROR`, `SEARCH("x")`, `severity=`, `(severity=ERROR`, `a.."b"=c`, `x=~"("`} {
		_, err := Parse(q)
		assert.Error(t, err, q)
	}

	x, err := ParseExtractor(`REGEXP_EXTRACT(httpRequest.latency, "^([0-9.]+)s$")`)
	require.NoError(t, err)
	v, ok := x.Extract(Entry{"httpRequest": map[string]any{"latency": "0.012s"}})
	assert.True(t, ok)
	assert.Equal(t, "0.012", v)
	x, err = ParseExtractor(`EXTRACT(jsonPayload.lagMillis)`)
	require.NoError(t, err)
	v, ok = x.Extract(e)
	assert.True(t, ok)
	assert.Equal(t, "42", v)
	for _, bad := range []string{`EXTRACT(a, "b")`, `REGEXP_EXTRACT(a, "no group")`, `LOWER(a)`} {
		_, err := ParseExtractor(bad)
		assert.Error(t, err, bad)
	}
}
