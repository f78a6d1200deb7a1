package fnruntime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/functions/fnruntime"
)

func TestLazyRetriesAFailureAndKeepsASuccess(t *testing.T) {
	calls := 0
	l := fnruntime.Lazy[int]{New: func(context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 0, errors.New("metadata server not ready")
		}
		return 42, nil
	}}
	_, err := l.Get(t.Context())
	require.Error(t, err)
	for range 3 {
		v, err := l.Get(t.Context())
		require.NoError(t, err)
		assert.Equal(t, 42, v)
	}
	assert.Equal(t, 2, calls)
}

func TestDuration(t *testing.T) {
	env := map[string]string{"OK": "2m", "BAD": "soon", "NEG": "-1s"}
	get := func(k string) string { return env[k] }
	d, err := fnruntime.Duration(get, "UNSET", time.Hour)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, d)
	d, err = fnruntime.Duration(get, "OK", time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, d)
	for _, name := range []string{"BAD", "NEG"} {
		_, err := fnruntime.Duration(get, name, time.Hour)
		assert.ErrorContains(t, err, name)
	}
}

func TestBytes(t *testing.T) {
	env := map[string]string{"MI": "160Mi", "RAW": "1048576", "BAD": "lots", "NEG": "-1Mi", "FRACTION": "0.5"}
	get := func(k string) string { return env[k] }
	for name, want := range map[string]int{"UNSET": 7 << 20, "MI": 160 << 20, "RAW": 1 << 20} {
		n, err := fnruntime.Bytes(get, name, 7<<20)
		require.NoError(t, err, name)
		assert.Equal(t, want, n, name)
	}
	for _, name := range []string{"BAD", "NEG", "FRACTION"} {
		_, err := fnruntime.Bytes(get, name, 7<<20)
		assert.ErrorContains(t, err, name+"=")
	}
}
