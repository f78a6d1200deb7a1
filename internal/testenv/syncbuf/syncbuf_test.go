package syncbuf

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestConcurrentWritesAreKeptWhole(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 800, strings.Count(b.String(), "line\n"))
}
