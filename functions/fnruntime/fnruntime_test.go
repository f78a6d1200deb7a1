package fnruntime_test

import (
	"context"
	"errors"
	"log/slog"
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

func TestEnvDefaultsParsesAndNamesEveryError(t *testing.T) {
	env := map[string]string{"D": "2m", "B": "160Mi", "RAW": "1048576", "N": "3", "S": "x", "L": "debug",
		"BAD_D": "soon", "NEG_D": "-1s", "ZERO_D": "0s", "BAD_B": "lots", "NEG_B": "-1Mi", "FRACTION": "0.5", "LOW_N": "0", "BAD_L": "loud"}
	e := fnruntime.NewEnv(func(k string) string { return env[k] })
	var d, unsetD time.Duration
	var b, raw, unsetB, n, unsetN int
	var s, unsetS string
	var l slog.Level
	e.Duration(&d, "D", time.Hour)
	e.Duration(&unsetD, "UNSET", time.Hour)
	e.Bytes(&b, "B", 7<<20)
	e.Bytes(&raw, "RAW", 7<<20)
	e.Bytes(&unsetB, "UNSET", 7<<20)
	e.Int(&n, "N", 5, 1)
	e.Int(&unsetN, "UNSET", 5, 1)
	e.String(&s, "S", "def")
	e.String(&unsetS, "UNSET", "def")
	e.Level(&l, "L")
	require.NoError(t, e.Err())
	assert.Equal(t, []any{2 * time.Minute, time.Hour, 160 << 20, 1 << 20, 7 << 20, 3, 5, "x", "def", slog.LevelDebug},
		[]any{d, unsetD, b, raw, unsetB, n, unsetN, s, unsetS, l})

	var ignored time.Duration
	var ignoredN int
	for _, name := range []string{"BAD_D", "NEG_D", "ZERO_D"} {
		e.Duration(&ignored, name, time.Hour)
	}
	for _, name := range []string{"BAD_B", "NEG_B", "FRACTION"} {
		e.Bytes(&ignoredN, name, 7<<20)
	}
	e.Int(&ignoredN, "LOW_N", 5, 1)
	e.Level(&l, "BAD_L")
	err := e.Err()
	require.Error(t, err)
	for _, name := range []string{"BAD_D", "NEG_D", "ZERO_D", "BAD_B", "NEG_B", "FRACTION", "LOW_N", "BAD_L"} {
		assert.ErrorContains(t, err, name+"=", "every error is reported, not only the first")
	}
}
