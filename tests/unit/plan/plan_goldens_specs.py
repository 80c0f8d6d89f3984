"""The sample specs whose every task's TF_CONFIG and env ``tests/unit/plan/data/plan_goldens.json`` holds,
as the plan built them before the cluster was shared: test_plan_scale.py checks
that the plan still gives each task exactly those bytes. They run with ``devices: {threads: 0}``,
as every plan did then (the thread budgets came later: test_threads.py checks those)."""

SPECS = {
    "local_mwms_chief_evaluator": """\
        name: demo
        strategy: multi_worker_mirrored
        entrypoint: python -m worker --epochs 3
        tasks: {chief: 1, worker: 3, evaluator: 1}
        devices: {threads: 0}
        ports: {base: 3000}
        env: {LR: 0.5, API_TOKEN: s3cret}
    """,
    "ssh_pss_explicit_ports": """\
        name: pss
        strategy: parameter_server
        backend: ssh
        entrypoint: python train.py --msg 'hello world'
        hosts: [{name: a, ssh: root@a.internal}, {name: b, address: 10.0.0.2}, {name: c}]
        tasks:
          chief: 1
          ps: {count: 2, ports: [5000, 5000]}
          worker: 4
          evaluator: 1
        env: {TF_USE_LEGACY_KERAS: '0'}
        devices: {threads: 0}
    """,
    "docker_mwms_gpus": """\
        name: d
        strategy: multi_worker_mirrored
        backend: docker
        entrypoint: python -m worker
        tasks: {chief: 1, worker: 2}
        devices: {gpus: [0, 2], threads: 0}
    """,
    "mirrored_single_host": """\
        name: m
        strategy: mirrored
        entrypoint: python -m worker
        devices: {cpus: 4, threads: 0}
    """,
    "tpu": """\
        name: t
        strategy: tpu
        entrypoint: python -m worker
        tpu: {name: my-tpu, zone: z, project: p}
        devices: {threads: 0}
    """,
}
