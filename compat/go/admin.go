package main

import (
	"errors"
	"fmt"
	"sort"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// statusOf is the HTTP status of a failed admin call (0 for none, -1 for an error without one).
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var restError rest.Error
	if errors.As(err, &restError) {
		return restError.Code
	}
	return -1
}

func topicName(topic string) (utils.TopicName, error) {
	name, err := utils.GetTopicName(topic)
	if err != nil {
		return utils.TopicName{}, err
	}
	return *name, nil
}

func sorted(values []string) []string {
	copied := append([]string{}, values...)
	sort.Strings(copied)
	return copied
}

// adminResources: clusters, tenants and namespaces, created, read, listed and deleted through pulsaradmin.
func adminResources(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	result := observed{}
	clusters, err := admin.Clusters().List()
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	result["clusters"] = clusters
	cluster, err := admin.Clusters().Get("standalone")
	if err != nil {
		return nil, fmt.Errorf("get cluster: %w", err)
	}
	result["cluster_service_url"] = cluster.ServiceURL
	result["cluster_broker_service_url"] = cluster.BrokerServiceURL

	tenant := e.name + "-tenant"
	if err := admin.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{"standalone"}}); err != nil {
		return nil, fmt.Errorf("create tenant: %w", err)
	}
	tenants, err := admin.Tenants().List()
	if err != nil {
		return nil, err
	}
	result["tenant_listed"] = contains(tenants, tenant)
	info, err := admin.Tenants().Get(tenant)
	if err != nil {
		return nil, err
	}
	result["tenant_allowed_clusters"] = info.AllowedClusters
	err = admin.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{"standalone"}})
	result["tenant_create_again_status"] = statusOf(err)

	namespace := tenant + "/ns"
	if err := admin.Namespaces().CreateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	namespaces, err := admin.Namespaces().GetNamespaces(tenant)
	if err != nil {
		return nil, err
	}
	result["namespaces"] = namespaces
	policies, err := admin.Namespaces().GetPolicies(namespace)
	if err != nil {
		return nil, fmt.Errorf("get policies: %w", err)
	}
	result["namespace_replication_clusters"] = policies.ReplicationClusters
	if err := admin.Namespaces().SetNamespaceMessageTTL(namespace, 120); err != nil {
		return nil, fmt.Errorf("set message TTL: %w", err)
	}
	ttl, err := admin.Namespaces().GetNamespaceMessageTTL(namespace)
	if err != nil {
		return nil, fmt.Errorf("get message TTL: %w", err)
	}
	result["namespace_message_ttl"] = ttl
	if err := admin.Namespaces().DeleteNamespace(namespace); err != nil {
		return nil, fmt.Errorf("delete namespace: %w", err)
	}
	namespaces, err = admin.Namespaces().GetNamespaces(tenant)
	if err != nil {
		return nil, err
	}
	result["namespaces_after_delete"] = namespaces
	if err := admin.Tenants().Delete(tenant); err != nil {
		return nil, fmt.Errorf("delete tenant: %w", err)
	}
	_, err = admin.Tenants().Get(tenant)
	result["deleted_tenant_get_status"] = statusOf(err)
	return result, nil
}

// adminTopics: topics in a namespace of their own, persistent and non-persistent, plain and
// partitioned: listed, created, deleted, their partitions read and grown, their stats and subscriptions.
func adminTopics(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	namespace := "public/" + e.name
	if err := admin.Namespaces().CreateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	ns, err := utils.GetNamespaceName(namespace)
	if err != nil {
		return nil, err
	}
	result := observed{}
	partitionedList, plainList, err := admin.Topics().List(*ns)
	if err != nil {
		return nil, fmt.Errorf("list topics of an empty namespace: %w", err)
	}
	result["empty_namespace_list"] = observed{"partitioned": partitionedList, "non_partitioned": plainList}

	plain := "persistent://" + namespace + "/plain"
	parted := "persistent://" + namespace + "/parted"
	volatile := "non-persistent://" + namespace + "/volatile"
	plainName, err := topicName(plain)
	if err != nil {
		return nil, err
	}
	partedName, err := topicName(parted)
	if err != nil {
		return nil, err
	}
	volatileName, err := topicName(volatile)
	if err != nil {
		return nil, err
	}
	if err := admin.Topics().Create(plainName, 0); err != nil {
		return nil, fmt.Errorf("create non-partitioned topic: %w", err)
	}
	if err := admin.Topics().Create(partedName, 2); err != nil {
		return nil, fmt.Errorf("create partitioned topic: %w", err)
	}
	result["create_existing_status"] = statusOf(admin.Topics().Create(plainName, 0))

	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: plain, SubscriptionName: "sub", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	if _, err := produce(client, plain, numbered("m", 5)); err != nil {
		return nil, err
	}
	if _, err := produce(client, volatile, numbered("v", 2)); err != nil {
		return nil, err
	}

	partitionedList, plainList, err = admin.Topics().List(*ns)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	result["list"] = observed{"partitioned": sorted(partitionedList), "non_partitioned": sorted(plainList)}
	namespaceTopics, err := admin.Namespaces().GetTopics(namespace)
	if err != nil {
		return nil, fmt.Errorf("namespace topics: %w", err)
	}
	result["namespace_topics"] = sorted(namespaceTopics)

	metadata, err := admin.Topics().GetMetadata(partedName)
	if err != nil {
		return nil, err
	}
	result["partitions"] = metadata.Partitions
	if err := admin.Topics().Update(partedName, 3); err != nil {
		return nil, fmt.Errorf("update partitions: %w", err)
	}
	metadata, err = admin.Topics().GetMetadata(partedName)
	if err != nil {
		return nil, err
	}
	result["partitions_after_update"] = metadata.Partitions
	result["shrink_status"] = statusOf(admin.Topics().Update(partedName, 1))

	stats, err := admin.Topics().GetStats(plainName)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	result["stats_msg_in_counter"] = stats.MsgCounterIn
	result["stats_sub_backlog"] = stats.Subscriptions["sub"].MsgBacklog
	result["stats_sub_consumers"] = len(stats.Subscriptions["sub"].Consumers)

	if err := admin.Subscriptions().Create(plainName, "created", utils.Earliest); err != nil {
		return nil, fmt.Errorf("create subscription: %w", err)
	}
	subscriptions, err := admin.Subscriptions().List(plainName)
	if err != nil {
		return nil, err
	}
	result["subscriptions"] = sorted(subscriptions)
	stats, err = admin.Topics().GetStats(plainName)
	if err != nil {
		return nil, err
	}
	result["created_subscription_backlog"] = stats.Subscriptions["created"].MsgBacklog
	if err := admin.Subscriptions().Delete(plainName, "created"); err != nil {
		return nil, fmt.Errorf("delete subscription: %w", err)
	}
	subscriptions, err = admin.Subscriptions().List(plainName)
	if err != nil {
		return nil, err
	}
	result["subscriptions_after_delete"] = sorted(subscriptions)
	result["missing_subscription_delete_status"] = statusOf(admin.Subscriptions().Delete(plainName, "missing"))
	consumer.Close()

	if err := admin.Topics().Delete(plainName, true, true); err != nil {
		return nil, fmt.Errorf("delete topic: %w", err)
	}
	if err := admin.Topics().Delete(partedName, true, false); err != nil {
		return nil, fmt.Errorf("delete partitioned topic: %w", err)
	}
	if err := admin.Topics().Delete(volatileName, true, true); err != nil {
		return nil, fmt.Errorf("delete non-persistent topic: %w", err)
	}
	partitionedList, plainList, err = admin.Topics().List(*ns)
	if err != nil {
		return nil, err
	}
	result["list_after_delete"] = observed{"partitioned": partitionedList, "non_partitioned": plainList}
	_, err = admin.Topics().GetStats(plainName)
	result["deleted_topic_stats_status"] = statusOf(err)
	if err := admin.Namespaces().DeleteNamespace(namespace); err != nil {
		return nil, fmt.Errorf("delete namespace: %w", err)
	}
	return result, nil
}

// adminBrokers: the brokers endpoints pulsaradmin offers: health, leader, active brokers, owned
// namespaces and the configuration listings.
func adminBrokers(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	result := observed{}
	result["health_check_error"] = errorText(admin.Brokers().HealthCheck())
	leader, err := admin.Brokers().GetLeaderBroker()
	if err != nil {
		return nil, fmt.Errorf("leader broker: %w", err)
	}
	result["leader"] = observed{"serviceUrl": leader.ServiceURL, "brokerId": leader.BrokerID}
	active, err := admin.Brokers().GetActiveBrokers("standalone")
	if err != nil {
		return nil, fmt.Errorf("active brokers of the cluster: %w", err)
	}
	result["active_brokers"] = active
	_, err = admin.Brokers().GetActiveBrokers("no-such-cluster")
	result["unknown_cluster_status"] = statusOf(err)
	listed, err := admin.Brokers().GetListActiveBrokers()
	if err != nil {
		return nil, fmt.Errorf("active brokers: %w", err)
	}
	result["list_active_brokers"] = listed
	if len(active) > 0 {
		owned, err := admin.Brokers().GetOwnedNamespaces("standalone", active[0])
		if err != nil {
			return nil, fmt.Errorf("owned namespaces: %w", err)
		}
		result["owned_namespaces"] = owned
	}
	names, err := admin.Brokers().GetDynamicConfigurationNames()
	if err != nil {
		return nil, fmt.Errorf("dynamic configuration names: %w", err)
	}
	result["dynamic_configuration_names"] = names
	values, err := admin.Brokers().GetAllDynamicConfigurations()
	if err != nil {
		return nil, fmt.Errorf("dynamic configuration values: %w", err)
	}
	result["dynamic_configuration_values"] = values
	runtime, err := admin.Brokers().GetRuntimeConfigurations()
	if err != nil {
		return nil, fmt.Errorf("runtime configuration: %w", err)
	}
	result["runtime_configuration"] = observed{
		"clusterName":            runtime["clusterName"],
		"allowAutoTopicCreation": runtime["allowAutoTopicCreation"],
		"keys":                   len(runtime),
	}
	return result, nil
}

func contains(values []string, wanted string) bool {
	for _, value := range values {
		if value == wanted {
			return true
		}
	}
	return false
}
