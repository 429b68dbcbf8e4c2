#!/usr/bin/env node
'use strict'
/*
 * kafkajs driver for Seaway's integration tests (called by tests/support/clients.py).
 *
 * Reads ONE JSON request on stdin, prints ONE JSON answer on stdout, exits 0 (or 1 with
 * {"error": {...}}). Bytes (keys, values, header values) travel as base64 strings; null stays null.
 *
 *   {"action": "produce", "brokers": ["127.0.0.1:9092"], "topic": "t",
 *    "acks": -1, "compression": "none"|"gzip"|"snappy"|"lz4"|"zstd", "idempotent": false,
 *    "timeout_ms": 30000,
 *    "records": [{"key": b64|null, "value": b64|null, "headers": [[name, b64|null], ...],
 *                 "timestamp": ms|null, "partition": int|null}]}
 *   -> {"records": [{"partition": int, "offset": int|null}], "requests": {...}}
 *   (records without a partition are placed first with kafkajs's DefaultPartitioner, exactly
 *   as producer.send() would, so that every record's partition and offset can be reported)
 *
 *   {"action": "consume", "brokers": [...], "topic": "t", "partitions": {"0": 0, "1": "earliest"},
 *    "count": 10, "timeout_ms": 20000, "isolation_level": "read_committed"|"read_uncommitted"}
 *   -> {"records": [{"partition", "offset", "key", "value", "headers", "timestamp"}], "requests": {...}}
 *
 *   {"action": "transactions", "brokers": [...], "topic": "t", "transactional_id": "tx",
 *    "transactions": [{"commit": true|false, "records": [{"value": b64, "partition": int}]}]}
 *   -> {"done": [true|false, ...]}   (each transaction sent, then committed or aborted, in order,
 *   by one transactional producer: kafkajs's producer.transaction(), send, commit/abort)
 *
 *   {"action": "offsets", "brokers": [...], "topic": "t"}
 *   -> {"offsets": [{"partition": 0, "low": 0, "high": 5}], "requests": {...}}
 *
 *   {"action": "admin", "brokers": [...], "calls": [{"method": "createTopics", "args": {...}}, ...]}
 *   -> {"results": [{"ok": <what the method resolved to>} | {"error": {"name", "type", "message",
 *      "errors": [{"type", "message"}, ...]}}, ...]}   (one kafkajs admin, the calls in order)
 *
 * "requests" maps each Kafka API kafkajs sent to the versions it used, e.g. {"Fetch": [11]}.
 * Any request may carry "ssl": {"ca": PATH, "cert": PATH, "key": PATH} to connect over TLS
 * (the server is checked against ca; cert and key, for mTLS, are optional), and "sasl":
 * {"mechanism": "plain", "username": U, "password": P} to authenticate (kafkajs's own shape).
 *
 * Consuming without a consumer group: kafkajs's public Consumer always joins a group, so the
 * consume action drives kafkajs's own protocol layer the way its ConsumerGroup.fetch() does:
 * the Cluster that Kafka#producer/consumer/admin build (via the client's private
 * createCluster factory), cluster.findLeaderForPartitions + findBroker, broker.fetch() (a real
 * kafkajs Fetch request, version negotiated by kafkajs), and kafkajs's consumer Batch class to
 * drop records below the fetch offset, control records and aborted transactions.
 */

const fs = require('fs')
const kafkajs = require('kafkajs')
const { Kafka, logLevel, CompressionTypes, Partitioners } = kafkajs
require('./codecs').register(kafkajs) // snappy, lz4, zstd (kafkajs itself has only gzip)
const Batch = require('kafkajs/src/consumer/batch')
const ISOLATION_LEVEL = require('kafkajs/src/protocol/isolationLevel')

const requestVersions = {}
const LOG_LEVEL = logLevel[(process.env.KAFKAJS_LOG_LEVEL || 'ERROR').toUpperCase()] ?? logLevel.ERROR

// kafkajs's console logger writes to stdout, which carries our JSON answer: log to stderr, and
// pick the API versions out of the connection's debug lines "Request Fetch(key: 1, version: 11)".
const logCreator = () => ({ namespace, level, label, log }) => {
  const m = /^Request (\w+)\(key: (\d+), version: (\d+)\)/.exec(log.message || '')
  if (m) {
    const seen = (requestVersions[m[1]] = requestVersions[m[1]] || [])
    if (!seen.includes(Number(m[3]))) seen.push(Number(m[3]))
  }
  if (level <= LOG_LEVEL) {
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`)
  }
}

const b64 = v => (v == null ? null : Buffer.from(v, 'base64'))
const toB64 = v => (v == null ? null : Buffer.from(v).toString('base64'))

function client(req) {
  return new Kafka({
    clientId: req.client_id || 'seaway-kafkajs',
    brokers: req.brokers,
    logLevel: logLevel.DEBUG, // filtered in logCreator; DEBUG is needed to see request versions
    logCreator,
    connectionTimeout: 5000,
    requestTimeout: req.request_timeout_ms || 30000,
    retry: { retries: req.retries ?? 5, initialRetryTime: 100, maxRetryTime: 2000 },
    ssl: tlsOptions(req.ssl),
    sasl: req.sasl, // {"mechanism": "plain" | "scram-sha-256" | "scram-sha-512", "username", "password"}
  })
}

// {"ssl": {"ca": PATH, "cert": PATH, "key": PATH}}: TLS, checking the server against ca.
function tlsOptions(ssl) {
  if (!ssl) return undefined
  const read = path => (path ? fs.readFileSync(path) : undefined)
  return { ca: ssl.ca ? [read(ssl.ca)] : undefined, cert: read(ssl.cert), key: read(ssl.key), rejectUnauthorized: true }
}

// Build the same Cluster object kafkajs's producer/consumer/admin use, without a group.
function createCluster(kafka, options) {
  const sym = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  if (!sym) throw new Error('kafkajs internals changed: Kafka has no private createCluster')
  return kafka[sym](options)
}

// kafkajs can only express headers as an object: duplicate names become arrays, names keep
// first-seen order. clients.py refuses header lists this would reorder.
function headersObject(pairs) {
  const obj = {}
  for (const [name, value] of pairs || []) {
    const v = b64(value)
    if (!(name in obj)) obj[name] = v
    else if (Array.isArray(obj[name])) obj[name].push(v)
    else obj[name] = [obj[name], v]
  }
  return obj
}

function headersList(obj) {
  const out = []
  for (const [name, value] of Object.entries(obj || {})) {
    for (const v of Array.isArray(value) ? value : [value]) out.push([name, toB64(v)])
  }
  return out
}

async function produce(kafka, req) {
  const compression = {
    none: CompressionTypes.None,
    gzip: CompressionTypes.GZIP,
    snappy: CompressionTypes.Snappy,
    lz4: CompressionTypes.LZ4,
    zstd: CompressionTypes.ZSTD,
  }[req.compression || 'none']
  if (compression === undefined) throw new Error(`unknown compression ${req.compression}`)
  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
    idempotent: !!req.idempotent,
    maxInFlightRequests: req.idempotent ? 1 : undefined,
  })
  await producer.connect()
  try {
    const messages = req.records.map(r => {
      const m = { key: b64(r.key), value: b64(r.value), headers: headersObject(r.headers) }
      if (r.partition != null) m.partition = r.partition
      if (r.timestamp != null) m.timestamp = String(r.timestamp)
      return m
    })
    if (messages.some(m => m.partition === undefined)) {
      // Place them now with the partitioner the producer would use, so we know where each went.
      const partitioner = Partitioners.DefaultPartitioner()
      const partitionMetadata = await topicPartitions(kafka, req.topic)
      for (const message of messages) {
        message.partition = partitioner({ topic: req.topic, partitionMetadata, message })
      }
    }
    const acks = req.acks ?? -1
    const meta = await producer.send({
      topic: req.topic,
      messages,
      acks,
      compression,
      timeout: req.timeout_ms || 30000,
    })
    // kafkajs sends one batch per partition, messages in request order: offset = base + index.
    const base = {}
    for (const m of meta || []) {
      if (m.errorCode) throw new Error(`produce error ${m.errorCode} on partition ${m.partition}`)
      base[m.partition] = m.baseOffset == null ? null : BigInt(m.baseOffset)
    }
    const seen = {}
    return {
      records: messages.map(m => {
        const i = (seen[m.partition] = (seen[m.partition] ?? -1) + 1)
        const b = base[m.partition]
        const known = acks !== 0 && b != null && b >= 0n
        return { partition: m.partition, offset: known ? Number(b + BigInt(i)) : null }
      }),
    }
  } finally {
    await producer.disconnect()
  }
}

async function transactions(kafka, req) {
  const producer = kafka.producer({
    transactionalId: req.transactional_id,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  const done = []
  try {
    for (const t of req.transactions) {
      const txn = await producer.transaction()
      await txn.send({
        topic: req.topic,
        messages: t.records.map(r => ({ value: b64(r.value), partition: r.partition })),
      })
      if (t.commit) await txn.commit()
      else await txn.abort()
      done.push(t.commit)
    }
  } finally {
    await producer.disconnect()
  }
  return { done }
}

async function topicPartitions(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
    return topics[0].partitions
  } finally {
    await admin.disconnect()
  }
}

async function fetchOffsets(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return (await admin.fetchTopicOffsets(topic)).map(p => ({
      partition: p.partition,
      low: Number(p.low),
      high: Number(p.high),
    }))
  } finally {
    await admin.disconnect()
  }
}

async function consume(kafka, req) {
  const isolationLevel =
    req.isolation_level === 'read_uncommitted'
      ? ISOLATION_LEVEL.READ_UNCOMMITTED
      : ISOLATION_LEVEL.READ_COMMITTED // kafkajs's consumer default
  const deadline = Date.now() + (req.timeout_ms || 20000)
  const count = req.count ?? Infinity

  const next = new Map() // partition -> next fetch offset (string, as kafkajs uses)
  const symbolic = Object.entries(req.partitions).filter(([, o]) => typeof o === 'string')
  const resolved = symbolic.length ? await fetchOffsets(kafka, req.topic) : []
  for (const [p, o] of Object.entries(req.partitions)) {
    const partition = Number(p)
    if (o === 'earliest' || o === 'latest') {
      const r = resolved.find(x => x.partition === partition)
      if (!r) throw new Error(`partition ${partition} of ${req.topic} not found`)
      next.set(partition, String(o === 'earliest' ? r.low : r.high))
    } else {
      next.set(partition, String(o))
    }
  }

  const cluster = createCluster(kafka, {
    metadataMaxAge: 300000,
    allowAutoTopicCreation: false,
    isolationLevel,
  })
  await cluster.connect()
  const records = []
  try {
    await cluster.addTargetTopic(req.topic)
    while (records.length < count && Date.now() < deadline) {
      const leaders = cluster.findLeaderForPartitions(req.topic, [...next.keys()])
      let fetched = 0
      for (const [nodeId, partitions] of Object.entries(leaders)) {
        const broker = await cluster.findBroker({ nodeId })
        const wait = Math.max(0, Math.min(req.max_wait_ms ?? 500, deadline - Date.now()))
        let responses
        try {
          ;({ responses } = await broker.fetch({
            isolationLevel,
            maxWaitTime: wait,
            minBytes: 1,
            maxBytes: 10485760,
            topics: [
              {
                topic: req.topic,
                partitions: partitions.map(p => ({
                  partition: p,
                  fetchOffset: next.get(p),
                  maxBytes: 1048576,
                })),
              },
            ],
          }))
        } catch (e) {
          if (e.retriable && Date.now() < deadline) {
            await cluster.refreshMetadata()
            continue
          }
          throw e
        }
        for (const { topicName, partitions: parts } of responses) {
          for (const partitionData of parts) {
            const batch = new Batch(topicName, next.get(partitionData.partition), partitionData)
            for (const m of batch.messages) {
              if (records.length >= count) break
              records.push({
                partition: batch.partition,
                offset: Number(m.offset),
                key: toB64(m.key),
                value: toB64(m.value),
                headers: headersList(m.headers),
                timestamp: m.timestamp == null ? null : Number(m.timestamp),
              })
              next.set(batch.partition, (BigInt(m.offset) + 1n).toString())
              fetched++
            }
            // Same rule as kafkajs's Runner: skip batches of only control/aborted records.
            if (batch.isEmptyDueToFiltering()) {
              next.set(batch.partition, (BigInt(batch.lastOffset()) + 1n).toString())
            }
          }
        }
      }
      if (!fetched) await new Promise(r => setTimeout(r, 50))
    }
  } finally {
    await cluster.disconnect()
  }
  return { records }
}

// One admin client, several calls in a row, each answered on its own: {"ok": result} or
// {"error": {name, type, message, errors: [{type, message}, ...]}} (kafkajs aggregates the
// per-topic errors of createTopics and the like in err.errors).
async function adminCalls(kafka, req) {
  const admin = kafka.admin()
  await admin.connect()
  const results = []
  try {
    for (const call of req.calls) {
      try {
        const value = await admin[call.method](call.args)
        results.push({ ok: value === undefined ? null : value })
      } catch (err) {
        const nested = (err.errors || []).map(e => ({ type: e.type, message: e.message }))
        results.push({ error: { name: err.name, type: err.type, message: err.message, errors: nested } })
      }
    }
  } finally {
    await admin.disconnect()
  }
  return { results }
}

async function main() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const req = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const kafka = client(req)
  let result
  if (req.action === 'produce') result = await produce(kafka, req)
  else if (req.action === 'consume') result = await consume(kafka, req)
  else if (req.action === 'transactions') result = await transactions(kafka, req)
  else if (req.action === 'offsets') result = { offsets: await fetchOffsets(kafka, req.topic) }
  else if (req.action === 'admin') result = await adminCalls(kafka, req)
  else throw new Error(`unknown action ${req.action}`)
  result.requests = requestVersions
  return result
}

main().then(
  result => {
    const plain = (key, value) => (typeof value === 'bigint' ? value.toString() : value)
    process.stdout.write(JSON.stringify(result, plain) + '\n', () => process.exit(0))
  },
  err => {
    const error = { name: err.name, type: err.type, message: err.message, retriable: err.retriable }
    process.stdout.write(JSON.stringify({ error, requests: requestVersions }) + '\n', () =>
      process.exit(1)
    )
  }
)
