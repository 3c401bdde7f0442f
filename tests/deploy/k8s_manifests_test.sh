#!/bin/bash
# The shipped Kubernetes manifests validate against the Kubernetes API's schemas
# (deploy/k8s/check-manifests.sh), and the checker fails on broken copies: a wrong
# type, a missing required field, a broken MPIJob field, an unknown MPIJob field
# and a kind it has no schema for. Exits 77 (skipped) when npm cannot fetch the
# validator's packages.
# Usage: k8s_manifests_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
export XMOD_K8S_CHECK_DIR="$2/k8s-check"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check="$src/deploy/k8s/check-manifests.sh"

out=$(bash "$check" 2>&1)
code=$?
if [ "$code" = 77 ]; then echo "SKIPPED: $out"; exit 77; fi
echo "$out"
[ "$code" = 0 ] || { echo "FAILED: the shipped manifests do not validate (exit $code)"; exit 1; }
documents=$(cat "$src"/deploy/k8s/*.yaml | grep -c '^kind:')
valid=$(grep -c ': valid$' <<<"$out")
[ "$valid" = "$documents" ] || { echo "FAILED: $valid of $documents documents reported valid"; exit 1; }

# Each broken copy must be refused, naming the field.
broken() {  # NAME FILE SED_EXPR EXPECTED_TEXT
  local copy="$work/$1.yaml"
  sed -e "$3" "$src/deploy/k8s/$2" >"$copy"
  if cmp -s "$copy" "$src/deploy/k8s/$2"; then echo "FAILED: $1: the edit did not apply"; exit 1; fi
  local result
  result=$(bash "$check" "$copy" 2>&1)
  local status=$?
  echo "$result" | grep INVALID
  if [ "$status" != 1 ] || ! grep -q "INVALID: .*$4" <<<"$result"; then
    echo "FAILED: $1: expected exit 1 and an INVALID line with '$4', got exit $status:"
    echo "$result"
    exit 1
  fi
}
broken port-type coordinator.yaml 's/containerPort: 50051/containerPort: "grpc-port"/' \
  'containerPort must be integer'
broken container-name coordinator.yaml 's/- name: coordinator/- stdin: false/' \
  "must have required property 'name'\|must have required property name"
broken mpijob-slots workers-mpijob.yaml 's/slotsPerWorker: 2/slotsPerWorker: two/' \
  'slotsPerWorker: must be an integer'
broken mpijob-field workers-mpijob.yaml 's/mpiReplicaSpecs:/mpiReplicaSpec:/' \
  'mpiReplicaSpec: unknown field'
broken mpijob-pod workers-mpijob.yaml 's/claimName: xmod-runs}/claimName: 7, readOnly: maybe}/' \
  'mpiReplicaSpecs/Launcher/template'
broken unknown-kind coordinator.yaml 's/^kind: Service$/kind: Servise/' 'no schema for apiVersion v1, kind Servise'
echo "k8s manifests: $documents documents valid; 6 broken copies refused"
