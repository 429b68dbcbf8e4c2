#!/usr/bin/env node
'use strict'
/*
 * kafkajs traffic for the gateway tests (tests/support/gateway_traffic.py): an idempotent
 * acks=all producer writing numbered records, and a consumer group reading them. stdin says
 * when each stops: a line "stop-producing" stops the producer; the end of stdin stops both.
 * One JSON object per line on stdout:
 *
 *   {"acked": [partition, "value"]}     a record the producer had acknowledged
 *   {"consumed": [partition, "value"]}  a record the group delivered
 *   {"error": "text", "fatal": bool}    an error kafkajs reported (fatal: the client crashed
 *                                        or gave up, which the tests count as a failure)
 *   {"producer": "done"}                the producer stopped and disconnected (or never started)
 *   {"done": true}                      after stdin closed and both clients disconnected
 *
 * Usage: node gateway_traffic.js BROKERS TOPIC PARTITIONS GROUP PREFIX [RATE]
 */
const readline = require('readline')
const kafkajs = require('kafkajs')
const { Kafka, logLevel } = kafkajs

const [brokers, topic, partitionsText, group, prefix, rateText] = process.argv.slice(2)
const partitions = Number(partitionsText)
const rate = Number(rateText || 100)
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

const kafka = new Kafka({
  clientId: 'gateway-traffic',
  brokers: brokers.split(','),
  logLevel: logLevel.NOTHING,
  retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 2000 },
})

let stopProducing = false
let stopConsuming = false
const control = readline.createInterface({ input: process.stdin })
control.on('line', (line) => { if (line.trim() === 'stop-producing') stopProducing = true })
control.on('close', () => { stopProducing = true; stopConsuming = true })

async function produce () {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let i = 0
  while (!stopProducing) {
    const value = `${prefix}${i}`
    const partition = i % partitions
    try {
      await producer.send({ topic, acks: -1, messages: [{ value, partition }] })
      emit({ acked: [partition, value] })
      i += 1
    } catch (e) {
      emit({ error: `produce ${value}: ${e.message}`, fatal: true })
      break
    }
    await sleep(1000 / rate)
  }
  await producer.disconnect()
}

async function consume () {
  const consumer = kafka.consumer({ groupId: group, retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 2000 } })
  consumer.on(consumer.events.CRASH, (e) => {
    emit({ error: `consumer crashed: ${e.payload.error.message}`, fatal: !e.payload.restart })
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      emit({ consumed: [partition, message.value.toString()] })
    },
  })
  // The consumers read on until told to stop: what was produced last still arrives.
  while (!stopConsuming) await sleep(100)
  await consumer.disconnect()
}

const producing = produce()
  .catch((e) => { emit({ error: `producer: ${e.message}`, fatal: true }) })
  .finally(() => { emit({ producer: 'done' }) })
Promise.all([producing, consume()])
  .then(() => { emit({ done: true }); process.exit(0) })
  .catch((e) => { emit({ error: e.message, fatal: true }); emit({ done: true }); process.exit(1) })
