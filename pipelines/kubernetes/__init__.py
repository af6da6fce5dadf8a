"""Run the pipeline on Kubernetes: one batch/v1 Job per TFX node, created as its upstream
nodes succeed, on the official `kubernetes` client.

    from pipelines.kubernetes.driver import KubernetesRunner
    from pipelines.kubernetes.ir import plan_nodes

    runner = KubernetesRunner(config, batch_api, core_api, out=sys.stdout)
    report = runner.run(run_id, plan_nodes(ir, config), ir_uri)

Kubernetes itself is the engine: Jobs retry crashed pods (`backoffLimit`, with a
`podFailurePolicy` that fails the Job at once on exit code 2, a usage or configuration error),
an Indexed Job plus a headless Service runs a multi-worker Trainer (or a Kubeflow TFJob when
the Training Operator is installed), node pools come from `nodeSelector`, tolerations and
resource limits. The driver only decides what to create next, watches the Jobs and streams
their pods' logs. Everything it knows is in the cluster (Jobs and TFJobs labelled with the run
id), so a driver that was killed resumes where the run stands: finished nodes are not redone,
running Jobs are watched again, failed ones get a new attempt.

One concept per module:
- `ir`: the plan (which nodes, in which order, on which pool) and the IR the pods read.
- `objects`: what every object shares, defined once: the image's uid, the pod and container
  securityContext, the standard labels and metadata, the MLflow environment, YAML files.
- `manifests`: every object of a run as a plain dict (what `mptfx k8s compile` writes as
  YAML and `kubernetes-validate` checks), passed to the client as the request body;
  `infra_sidecar` adds TF Serving to the InfraValidator's pod.
- `serving`, `rollout_job`, `route`: the objects around TF Serving that `mptfx serve`
  renders (the canary HTTPRoute, monitoring, the rollout CronJob) and the route's patch.
- `api`: the edge that turns API and transport failures into one actionable line.
- `driver`: the loop that creates, watches, retries and adopts Jobs.
- `status`: what a run's Jobs say about it (states, durations, logs).
"""
