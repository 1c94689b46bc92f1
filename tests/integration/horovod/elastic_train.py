"""A tiny elastic Horovod training loop (TensorFlow, CPU) for the real-node test: linear regression on fixed
data, one allreduce per batch, a commit every COMMIT_EVERY batches. Prints what the test reads:
  COMMIT batch=N size=S    (rank 0, after each commit)
  RESET batch=N size=S     (every rank, after Horovod re-formed the ring; batch = where training goes on)
  ROLLBACK from=N to=M     (every rank whose in-memory state Horovod restored to the last commit)
"""

import os
import time

import horovod.tensorflow as hvd
import tensorflow as tf

COMMIT_EVERY = 5
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.2"))

hvd.init()
tf.random.set_seed(0)
x = tf.random.normal([256, 4])
y = x @ tf.constant([[1.0], [2.0], [3.0], [4.0]])
w = tf.Variable(tf.zeros([4, 1]))


class State(hvd.elastic.TensorFlowState):  # type: ignore[misc]
    def restore(self) -> None:
        before = self.batch
        super().restore()
        print(f"ROLLBACK from={before} to={self.batch}", flush=True)


state = State(variables=[w], batch=0)
state.register_reset_callbacks([lambda: print(f"RESET batch={state.batch} size={hvd.size()}", flush=True)])


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
                print(f"COMMIT batch={state.batch} size={hvd.size()} loss={float(loss):.4f}", flush=True)
        time.sleep(STEP_SECONDS)


train(state)
