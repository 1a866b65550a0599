// Command compat-go drives the official Go client (github.com/apache/pulsar-client-go) and its admin
// client (pulsaradmin) against a running broker, one named scenario per run. Each scenario prints one
// JSON line on stdout with what it observed; tests/compat/test_go*.py decide whether that is right.
//
// Usage: compat-go -service-url pulsar://127.0.0.1:6650 -admin-url http://127.0.0.1:8080 -name t1 SCENARIO
//
// A scenario that cannot go on (a client call failed where it must not) prints {"error": "..."} and
// exits 1. A failure the scenario expects (a refused exclusive producer, say) is an observation.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/sirupsen/logrus"
)

// observed is one scenario's report: JSON keys to values.
type observed map[string]any

// env is what every scenario gets: where the broker is, and a name unique to this run so that
// scenarios sharing a broker never share a topic.
type env struct {
	serviceURL string
	adminURL   string
	name       string
	// listenerName is the advertised listener a scenario's client may name (-listener-name).
	listenerName string
	// remoteServiceURL is another cluster's broker, which the broker under test replicates to
	// (-remote-service-url), for the geo-replication scenario.
	remoteServiceURL string
}

var scenarios = map[string]func(env) (observed, error){
	"chaos-produce":         chaosProduce,
	"compaction-read":       compactionRead,
	"compaction-table-view": compactionTableView,
	"compaction-threshold":  compactionThreshold,
	"listener-lookup":       listenerLookup,
	"read-python":           readPython,
	"producer-access-modes": producerAccessModes,
	"batching-compression":  batchingCompression,
	"subscription-types":    subscriptionTypes,
	"acks":                  acks,
	"ack-list":              ackList,
	"batch-index-ack":       batchIndexAck,
	"retry-topic":           retryTopic,
	"pattern-subscription":  patternSubscription,
	"negative-ack":          negativeAck,
	"dead-letter":           deadLetter,
	"reader":                reader,
	"readers-in-batch":      readersInBatch,
	"seek":                  seek,
	"delayed-delivery":      delayedDelivery,
	"partitioned":           partitioned,
	"http-lookup":           httpLookup,
	"admin-resources":       adminResources,
	"admin-topics":          adminTopics,
	"admin-subscriptions":   adminSubscriptionCursor,
	"admin-brokers":         adminBrokers,
	"schema-json":           schemaJSON,
	"schema-avro":           schemaAvro,
	"schema-partitioned":    schemaAvroPartitioned,
	"schema-non-persistent": schemaAvroNonPersistent,
	"schema-evolution":      schemaEvolution,
	"schema-read-python":    schemaReadPython,
	"schema-admin":          schemaAdmin,
	"geo-replicate":         geoReplicate,
}

func main() {
	serviceURL := flag.String("service-url", "", "the broker's pulsar:// (or http://) service URL")
	adminURL := flag.String("admin-url", "", "the broker's http:// admin URL")
	name := flag.String("name", "", "a name unique to this run; topics and resources are named after it")
	listenerName := flag.String("listener-name", "", "the advertised listener a scenario's client names, if any")
	remoteServiceURL := flag.String("remote-service-url", "", "a cluster the broker replicates to (geo-replicate)")
	flag.Usage = func() {
		names := make([]string, 0, len(scenarios))
		for scenario := range scenarios {
			names = append(names, scenario)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: compat-go -service-url URL -admin-url URL -name NAME SCENARIO\nscenarios: %v\n", names)
	}
	flag.Parse()
	run, found := scenarios[flag.Arg(0)]
	if flag.NArg() != 1 || !found || *serviceURL == "" || *adminURL == "" || *name == "" {
		flag.Usage()
		os.Exit(2)
	}
	result, err := run(env{
		serviceURL: *serviceURL, adminURL: *adminURL, name: *name, listenerName: *listenerName,
		remoteServiceURL: *remoteServiceURL,
	})
	if err != nil {
		result = observed{"error": err.Error()}
	}
	if encodeErr := json.NewEncoder(os.Stdout).Encode(result); encodeErr != nil {
		fmt.Fprintln(os.Stderr, encodeErr)
		os.Exit(1)
	}
	if err != nil {
		os.Exit(1)
	}
}

// newClient is a client of the broker; only the client's warnings and errors reach stderr.
func newClient(url string) (pulsar.Client, error) {
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	logger.SetLevel(logrus.WarnLevel)
	return pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		OperationTimeout:  15 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		Logger:            pulsarlog.NewLoggerWithLogrus(logger),
	})
}

func newAdmin(e env) (pulsaradmin.Client, error) {
	return pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: e.adminURL})
}

// topic is a persistent topic in public/default named after the run.
func (e env) topic(suffix string) string {
	return fmt.Sprintf("persistent://public/default/%s-%s", e.name, suffix)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
