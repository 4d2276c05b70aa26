"""The client side's Flower glue: a train reply that carries a round's jpower metrics.
Needs flwr (the `flower` extra).

    @app.train()
    def train(msg, context):
        ...
        with PowerRound(agent, modes, budget_for(msg.content["config"], name)) as rnd:
            ...
        return train_reply(msg, ArrayRecord(weights), rnd, name, num_examples)
"""

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from .round import NAME_RECORD, PowerRound

__all__ = ["train_reply"]


def train_reply(
    msg: Message, arrays: ArrayRecord, rnd: PowerRound, name: str, num_examples: int
) -> Message:
    """The reply to train message `msg`: the trained `arrays`, the round's metrics with
    `num-examples` (FedAvg's weight), and the client's `name` (for `JpowerStrategy`)."""
    metrics = rnd.metrics()
    metrics["num-examples"] = num_examples
    content = RecordDict(
        {
            "arrays": arrays,
            "metrics": MetricRecord(metrics),
            NAME_RECORD: ConfigRecord({"name": name}),
        }
    )
    return Message(content=content, reply_to=msg)
