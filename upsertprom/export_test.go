package upsertprom

import "github.com/prometheus/client_golang/prometheus"

// Accessors of single series for the tests (testutil.ToFloat64 wants one
// metric).

func (c *Collector) RequestsForTest(namespace, class, code string) prometheus.Counter {
	return c.requests.WithLabelValues(namespace, class, code)
}

func (c *Collector) RecordsSentForTest(namespace string) prometheus.Counter {
	return c.recordsSent.WithLabelValues(namespace)
}

func (c *Collector) RetriesForTest(namespace, class, kind string) prometheus.Counter {
	return c.retries.WithLabelValues(namespace, class, kind)
}

func (c *Collector) RetryWaitForTest(namespace string) prometheus.Counter {
	return c.retryWait.WithLabelValues(namespace)
}
