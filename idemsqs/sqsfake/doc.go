// Package sqsfake is an in-process Amazon SQS server for tests and for idem verify: it
// speaks the AWS JSON 1.0 protocol of github.com/aws/aws-sdk-go-v2/service/sqs on a
// loopback port, keeps its queues in memory, and implements what idemsqs relies on,
// with the semantics AWS documents for them:
//
//   - FIFO queues (names ending ".fifo"): MessageGroupId required; messages of one
//     group delivered in send order, and none of a group while another of it is in
//     flight; MessageDeduplicationId (or, with ContentBasedDeduplication, the
//     SHA-256 of the body) deduplicates sends for a fixed 5-minute window from the
//     first send, whether or not the message was received or deleted since.
//   - Standard queues, without order or dedup.
//   - Visibility timeouts, ChangeMessageVisibility (and its batch, 0 makes a message
//     visible at once), receipt handles that change at every receive (only the
//     latest one deletes or changes a message), ApproximateReceiveCount.
//   - Long polling (WaitTimeSeconds up to 20), batches of at most 10 entries; on a
//     FIFO queue, a retried ReceiveMessage with the same ReceiveRequestAttemptId
//     gets the messages the first try took, while they are unchanged in flight.
//   - SQS's limits: message size (body plus attributes) up to the queue's
//     MaximumMessageSize (256 KiB by default, at most 1 MiB), at most 10 message
//     attributes with SQS's name rules and non-empty values, bodies of the
//     characters SQS accepts.
//
// It is not SQS: there is no IAM (signatures are not checked), no retention period,
// no redrive policy, no delay queues, no tags, no permissions, no high-throughput
// partitioning. Its clock can be replaced
// (Config.Now) so a test can step past the 5-minute dedup window.
//
// It exists because the SQS fakes that run from Go modules here do not serve the
// current SDK: github.com/Admiral-Piett/goaws v0.4.4 understands only the older
// query protocol (form-encoded Action=…), which aws-sdk-go-v2's SQS client no longer
// sends, and it forgets a deduplication id when its message is deleted, while SQS
// keeps it for the whole window.
package sqsfake
