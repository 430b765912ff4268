#!/usr/bin/env bash
# Build the scinol-stream Dataflow Flex Template and launch a streaming job.
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket \
#   BOOTSTRAP=10.0.0.5:9092 TOPIC=events PREDICTIONS_TOPIC=predictions \
#   deploy/dataflow/launch.sh [build|run|all]
#
# Needs docker and gcloud (authenticated), an Artifact Registry repository
# REPO (default "scinol") in REGION, and a network from which the workers
# reach the Kafka brokers (NETWORK/SUBNETWORK). Kafka TLS/SASL settings go in
# a KEY=VALUE file on Cloud Storage: KAFKA_CONFIG_FILE=gs://.../kafka.properties.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPO="${REPO:-scinol}"
TAG="${TAG:-0.1.0}"
IMAGE="${REGION}-docker.pkg.dev/${PROJECT}/${REPO}/scinol-stream-dataflow:${TAG}"
TEMPLATE="gs://${BUCKET}/templates/scinol-stream-${TAG}.json"
STEP="${1:-all}"

build() {
  docker build -f deploy/Dockerfile --target worker -t scinol-stream-worker:"${TAG}" .
  docker build -f deploy/dataflow/Dockerfile --build-arg SCINOL_WORKER_IMAGE=scinol-stream-worker:"${TAG}" \
    -t "${IMAGE}" .
  docker push "${IMAGE}"
  gcloud dataflow flex-template build "${TEMPLATE}" --project "${PROJECT}" \
    --image "${IMAGE}" --sdk-language PYTHON --metadata-file deploy/dataflow/metadata.json
}

run() {
  : "${BOOTSTRAP:?set BOOTSTRAP}" "${TOPIC:?set TOPIC}" "${PREDICTIONS_TOPIC:?set PREDICTIONS_TOPIC}"
  local params="bootstrap=${BOOTSTRAP},topic=${TOPIC},predictions_topic=${PREDICTIONS_TOPIC}"
  params+=",learner=${LEARNER:-scinol2},loss=${LOSS:-logistic}"
  params+=",checkpoint_dir=${CHECKPOINT_DIR:-/checkpoints},checkpoint_seconds=${CHECKPOINT_SECONDS:-60}"
  params+=",group_id=${GROUP_ID:-scinol-dataflow}"
  [ -n "${KAFKA_CONFIG_FILE:-}" ] && params+=",kafka_config_file=${KAFKA_CONFIG_FILE}"
  # The workers run the same image (Beam's boot entrypoint) as the SDK harness.
  params+=",sdk_container_image=${IMAGE}"
  gcloud dataflow flex-template run "scinol-$(date +%Y%m%d-%H%M%S)" --project "${PROJECT}" --region "${REGION}" \
    --template-file-gcs-location "${TEMPLATE}" \
    --parameters "${params}" \
    --temp-location "gs://${BUCKET}/tmp" --staging-location "gs://${BUCKET}/staging" \
    --enable-streaming-engine \
    --num-workers "${NUM_WORKERS:-1}" --max-workers "${MAX_WORKERS:-1}" \
    --worker-machine-type "${MACHINE_TYPE:-n2-standard-4}" \
    ${NETWORK:+--network "${NETWORK}"} ${SUBNETWORK:+--subnetwork "${SUBNETWORK}"} \
    ${SERVICE_ACCOUNT:+--service-account-email "${SERVICE_ACCOUNT}"} \
    --additional-experiments use_runner_v2
}

case "${STEP}" in
  build) build ;;
  run) run ;;
  all) build; run ;;
  *) echo "usage: $0 [build|run|all]" >&2; exit 2 ;;
esac
