"""A tiny elastic Horovod training loop (TensorFlow, CPU) for the real-node test: linear regression on fixed
data, one allreduce per batch, a commit every COMMIT_EVERY batches. Prints what the test reads:
  COMMIT batch=N size=S    (rank 0, after each commit)
  RESET batch=N size=S     (every rank, after Horovod re-formed the ring; batch = where training goes on)
  ROLLBACK from=N to=M     (every rank whose in-memory state Horovod restored to the last commit)
"""

import os
import sys
import time

import horovod.tensorflow as hvd
import tensorflow as tf

COMMIT_EVERY = 5
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.2"))


def say(line: str) -> None:
    """One write per line. print() writes the text and the newline separately, and Horovod's C++ logger in the
    same process can land between them, gluing its timestamp onto our number (seen: `size=22026-11-30 ...`)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


hvd.init()
tf.random.set_seed(0)
x = tf.random.normal([256, 4])
y = x @ tf.constant([[1.0], [2.0], [3.0], [4.0]])
w = tf.Variable(tf.zeros([4, 1]))


class State(hvd.elastic.ObjectState):  # type: ignore[misc]
    """The model's variables plus `batch`. Not hvd.elastic.TensorFlowState: in TF2's eager mode that one
    broadcasts the variables in its constructor and never in sync(), so a worker added by a scale-out waits in
    that broadcast while the others wait in sync()'s broadcast_object, and the ring hangs at the new size
    (py-spy showed exactly that). Here every rank broadcasts the variables in sync(), at the same point."""

    def __init__(self, variables: list[tf.Variable], **kwargs: int) -> None:
        self.variables = variables
        self._values = [v.numpy() for v in variables]
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **kwargs)

    def save(self) -> None:
        self._values = [v.numpy() for v in self.variables]
        super().save()

    def restore(self) -> None:
        before = self.batch
        for v, value in zip(self.variables, self._values, strict=True):
            v.assign(value)
        super().restore()
        say(f"ROLLBACK from={before} to={self.batch}")

    def sync(self) -> None:
        hvd.broadcast_variables(self.variables, root_rank=0)
        self._values = [v.numpy() for v in self.variables]
        super().sync()


state = State(variables=[w], batch=0)
state.register_reset_callbacks([lambda: say(f"RESET batch={state.batch} size={hvd.size()}")])


@hvd.elastic.run  # type: ignore[misc]
def train(state: State) -> None:
    while True:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - y) ** 2)
        grad = hvd.allreduce(tape.gradient(loss, w))
        w.assign_sub(0.01 * grad)
        state.batch += 1
        if state.batch % COMMIT_EVERY == 0:
            state.commit()
            if hvd.rank() == 0:
                say(f"COMMIT batch={state.batch} size={hvd.size()} loss={float(loss):.4f}")
        time.sleep(STEP_SECONDS)


train(state)
