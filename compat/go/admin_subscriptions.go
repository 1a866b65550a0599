package main

import (
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// adminSubscriptionCursor: pulsaradmin moves a subscription's cursor: skip, skip all (clear backlog),
// reset by message id and by time; peeks at the messages in front of it; asks for the last message id.
// After each move the scenario reports the subscription's backlog and the message it would deliver next.
func adminSubscriptionCursor(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("cursor")
	name, err := topicName(topic)
	if err != nil {
		return nil, err
	}
	if err := admin.Topics().Create(name, 0); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	if err := admin.Subscriptions().Create(name, "sub", utils.Earliest); err != nil {
		return nil, fmt.Errorf("create subscription: %w", err)
	}
	early, err := producePaced(client, topic, numbered("m", 3))
	if err != nil {
		return nil, err
	}
	// A time after m-2's publish time and before m-3's (producePaced waits before each send).
	time.Sleep(5 * time.Millisecond)
	betweenM2AndM3 := time.Now().UnixMilli()
	late, err := producePaced(client, topic, numbered("m", 10)[3:])
	if err != nil {
		return nil, err
	}
	ids := append(early, late...)
	result := observed{}
	report := func(step string) error {
		stats, err := admin.Topics().GetStats(name)
		if err != nil {
			return fmt.Errorf("stats after %s: %w", step, err)
		}
		peeked, err := admin.Subscriptions().PeekMessages(name, "sub", 1)
		if err != nil {
			return fmt.Errorf("peek after %s: %w", step, err)
		}
		next := ""
		if len(peeked) > 0 {
			next = string(peeked[0].Payload)
		}
		result[step] = observed{"backlog": stats.Subscriptions["sub"].MsgBacklog, "next": next}
		return nil
	}
	if err := report("created"); err != nil {
		return nil, err
	}
	peeked, err := admin.Subscriptions().PeekMessages(name, "sub", 3)
	if err != nil {
		return nil, fmt.Errorf("peek 3: %w", err)
	}
	peekedPayloads := make([]string, len(peeked))
	for i, message := range peeked {
		peekedPayloads[i] = string(message.Payload)
	}
	result["peek_3"] = peekedPayloads
	steps := []struct {
		name string
		move func(pulsaradmin.Client) error
	}{
		{"skip_2", func(a pulsaradmin.Client) error { return a.Subscriptions().SkipMessages(name, "sub", 2) }},
		{"reset_to_m5_id", func(a pulsaradmin.Client) error {
			id := utils.MessageID{LedgerID: ids[5].LedgerID(), EntryID: ids[5].EntryID(), PartitionIndex: -1, BatchIndex: -1}
			return a.Subscriptions().ResetCursorToMessageID(name, "sub", id)
		}},
		{"reset_to_time_before_m3", func(a pulsaradmin.Client) error {
			return a.Subscriptions().ResetCursorToTimestamp(name, "sub", betweenM2AndM3)
		}},
	}
	for _, step := range steps {
		if err := step.move(admin); err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
		if err := report(step.name); err != nil {
			return nil, err
		}
	}
	if err := admin.Subscriptions().ClearBacklog(name, "sub"); err != nil {
		return nil, fmt.Errorf("clear backlog: %w", err)
	}
	stats, err := admin.Topics().GetStats(name)
	if err != nil {
		return nil, err
	}
	result["backlog_after_clear"] = stats.Subscriptions["sub"].MsgBacklog
	last, err := admin.Topics().GetLastMessageID(name)
	if err != nil {
		return nil, fmt.Errorf("last message id: %w", err)
	}
	result["last_message_id"] = fmt.Sprintf("%d:%d", last.LedgerID, last.EntryID)
	result["m9_id"] = fmt.Sprintf("%d:%d", ids[9].LedgerID(), ids[9].EntryID())
	return result, nil
}
