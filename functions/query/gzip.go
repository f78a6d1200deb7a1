package query

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
)

// minGzipBytes is the smallest answer worth gzipping: below it, the gzip
// header and the work cost more than they save. It is the
// InformationService's threshold, so that both APIs compress alike.
const minGzipBytes = fleetrpc.CompressMinBytes

// gzipWriters recycles the writers of whole answers (lists, placements;
// /metrics compresses its own, fleetmetrics.Snapshot.Gzip): a gzip writer holds about a megabyte of tables, and making
// one per answer was most of what the instance allocated under load, so
// most of its garbage collection.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // a valid level: no error
	return zw
}}

// answerBuffers recycles the buffers whole answers are encoded and
// compressed in: at 10 000 fleets a large page is megabytes, and a new
// buffer per answer was a quarter of what the instance allocated under
// heavy reads, so as much of its garbage collection.
var answerBuffers = bufferPool{max: 8 << 20}

// bufferPool is a pool of buffers that keeps none larger than max, so that
// one huge answer does not pin its memory for good.
type bufferPool struct {
	pool sync.Pool
	max  int
}

func (p *bufferPool) get() *bytes.Buffer {
	if b, ok := p.pool.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

func (p *bufferPool) put(b *bytes.Buffer) {
	if b.Cap() > p.max {
		return
	}
	b.Reset()
	p.pool.Put(b)
}

// gzipTo writes what write writes, gzipped, to buf.
func gzipTo(buf *bytes.Buffer, write func(io.Writer) error) error {
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(buf)
	if err := write(zw); err != nil {
		return err
	}
	return zw.Close()
}

// newStreamGzip returns the gzip writer of a stream (/v1/watch): a
// stateless one, which keeps no tables between writes, so that an
// instance's streams hold a few kilobytes each rather than a megabyte.
// Each write (a step of events, up to StepEvents) is compressed on its
// own, which a large initial step barely notices.
func newStreamGzip(w io.Writer) *gzip.Writer {
	zw, _ := gzip.NewWriterLevel(w, gzip.StatelessCompression) // a valid level: no error
	return zw
}
