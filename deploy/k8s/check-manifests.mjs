// Checks Kubernetes manifests against the API's schemas without a cluster:
//   node check-manifests.mjs FILE...
// Every YAML document is read as Kubernetes reads it (YAML 1.1: 0400 is octal) and
// validated with the kubernetes-models package (the OpenAPI schemas of the
// Kubernetes API compiled to validators: types, required fields, enums). Kubeflow's
// MPIJob (kubeflow.org/v2beta1) has no schema there: its own fields are checked
// here against the MPI Operator's v2beta1 API, and each of its pod templates with
// the core PodTemplateSpec schema. A kind with no schema is an error, not a pass.
// Prints one line per document; exits 1 when any document is invalid.
// Limits: unknown fields inside core objects are not reported (the compiled
// schemas allow them; `kubectl apply --validate=strict` would reject them).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const core = {
  "v1/PersistentVolumeClaim": "kubernetes-models/v1/PersistentVolumeClaim",
  "v1/Secret": "kubernetes-models/v1/Secret",
  "v1/Service": "kubernetes-models/v1/Service",
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
  "v1/Pod": "kubernetes-models/v1/Pod",
  "v1/PodTemplate": "kubernetes-models/v1/PodTemplate",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "batch/v1/Job": "kubernetes-models/batch/v1/Job",
};

async function ModelFor(key) {
  const module = await import(core[key]);
  const name = key.split("/").pop();
  return module[name];
}

// Throws the schema's error for one object of a core kind.
async function ValidateCore(key, object) {
  const Model = await ModelFor(key);
  new Model(object).validate();
}

function Fail(path, what) {
  throw new Error(`${path}: ${what}`);
}

function CheckKeys(object, path, allowed) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    Fail(path, "must be an object");
  }
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) Fail(`${path}/${key}`, `unknown field (allowed: ${allowed.join(", ")})`);
  }
}

function CheckInteger(value, path, minimum) {
  if (value === undefined) return;
  if (!Number.isInteger(value) || value < minimum) Fail(path, `must be an integer >= ${minimum}`);
}

// The MPI Operator's v2beta1 MPIJob: spec {slotsPerWorker, runPolicy,
// mpiReplicaSpecs {Launcher, Worker}, sshAuthMountPath, launcherCreationPolicy,
// mpiImplementation}; each replica spec {replicas, template, restartPolicy}.
async function ValidateMpiJob(object) {
  CheckKeys(object, "data", ["apiVersion", "kind", "metadata", "spec"]);
  if (!object.metadata || typeof object.metadata.name !== "string") {
    Fail("data/metadata", "must have required property name");
  }
  const spec = object.spec;
  CheckKeys(spec, "data/spec", ["slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath",
    "launcherCreationPolicy", "mpiImplementation", "runLauncherAsWorker"]);
  CheckInteger(spec.slotsPerWorker, "data/spec/slotsPerWorker", 1);
  if (spec.mpiImplementation !== undefined && !["OpenMPI", "Intel", "MPICH"].includes(spec.mpiImplementation)) {
    Fail("data/spec/mpiImplementation", "must be OpenMPI, Intel or MPICH");
  }
  if (spec.runPolicy !== undefined) {
    const policy = spec.runPolicy;
    CheckKeys(policy, "data/spec/runPolicy", ["cleanPodPolicy", "ttlSecondsAfterFinished",
      "activeDeadlineSeconds", "backoffLimit", "schedulingPolicy", "suspend", "managedBy"]);
    if (policy.cleanPodPolicy !== undefined && !["None", "Running", "All"].includes(policy.cleanPodPolicy)) {
      Fail("data/spec/runPolicy/cleanPodPolicy", "must be None, Running or All");
    }
    for (const field of ["ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"]) {
      CheckInteger(policy[field], `data/spec/runPolicy/${field}`, 0);
    }
  }
  const replicas = spec.mpiReplicaSpecs;
  CheckKeys(replicas, "data/spec/mpiReplicaSpecs", ["Launcher", "Worker"]);
  if (!replicas.Launcher) Fail("data/spec/mpiReplicaSpecs", "must have required property Launcher");
  for (const [role, replica] of Object.entries(replicas)) {
    const path = `data/spec/mpiReplicaSpecs/${role}`;
    CheckKeys(replica, path, ["replicas", "template", "restartPolicy"]);
    CheckInteger(replica.replicas, `${path}/replicas`, 0);
    if (role === "Launcher" && replica.replicas !== undefined && replica.replicas !== 1) {
      Fail(`${path}/replicas`, "a launcher has exactly one replica");
    }
    if (replica.restartPolicy !== undefined &&
        !["Always", "OnFailure", "Never", "ExitCode"].includes(replica.restartPolicy)) {
      Fail(`${path}/restartPolicy`, "must be Always, OnFailure, Never or ExitCode");
    }
    if (!replica.template) Fail(path, "must have required property template");
    try {
      // A PodTemplate wraps the template so that the core schema checks it whole.
      await ValidateCore("v1/PodTemplate", { metadata: { name: role.toLowerCase() }, template: replica.template });
    } catch (error) {
      Fail(`${path}/template`, error.message.replaceAll("data/template", "data"));
    }
  }
}
async function ValidateDocument(object) {
  if (object === null || typeof object !== "object") Fail("data", "is not a Kubernetes object");
  const key = `${object.apiVersion}/${object.kind}`;
  if (key === "kubeflow.org/v2beta1/MPIJob") return ValidateMpiJob(object);
  if (!(key in core)) Fail("data", `no schema for apiVersion ${object.apiVersion}, kind ${object.kind}`);
  return ValidateCore(key, object);
}

let failed = 0;
for (const file of process.argv.slice(2)) {
  let documents;
  try {
    documents = parseAllDocuments(readFileSync(file, "utf8"), { version: "1.1" });
  } catch (error) {
    console.log(`${file}: cannot read: ${error.message}`);
    failed++;
    continue;
  }
  const text = readFileSync(file, "utf8");
  let index = 0;
  for (const document of documents) {
    index++;
    const line = document.range ? text.slice(0, document.range[0]).split("\n").length : 0;
    if (document.errors.length > 0) {
      console.log(`${file}:${line}: document ${index}: YAML error: ${document.errors[0].message}`);
      failed++;
      continue;
    }
    const object = document.toJS();
    if (object === null || object === undefined) continue;  // an empty document
    const what = `${object.kind ?? "?"} ${object.metadata?.name ?? "?"}`;
    try {
      await ValidateDocument(object);
      console.log(`${file}:${line}: document ${index} (${what}): valid`);
    } catch (error) {
      console.log(`${file}:${line}: document ${index} (${what}): INVALID: ${error.message}`);
      failed++;
    }
  }
}
process.exit(failed > 0 ? 1 : 0);
