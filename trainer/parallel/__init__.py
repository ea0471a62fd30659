"""trainer.parallel: worker groups (local / Ray), FSDP2 sharding, token-balanced batch splitting.

    balance.py  equal-size, token-balanced partitions of a batch across ranks (pure)
    fsdp.py     FSDP2 wrapping, full-state gathers, bucketed full-tensor iteration for weight sync
    worker.py   RankWorker: one device's actor + reference + colocated rollout engine + memory sampler
    group.py    WorkerGroup: LocalWorkerGroup (in-process, world 1) and RayWorkerGroup (one actor a device)
"""
