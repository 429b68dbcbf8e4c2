'use strict'
/*
 * Snappy, LZ4 and ZSTD codecs for kafkajs (it ships only GZIP), all in plain JavaScript or
 * WebAssembly so that `npm ci` needs no native build and no download beyond the npm packages:
 *
 *   snappy  kafkajs-snappy (snappyjs): writes raw snappy, as librdkafka does; reads raw and
 *           xerial-framed snappy (what kafka-python and the Java client write).
 *   lz4     writes the LZ4 *frame* format (magic 0x184D2204) with independent 64 KiB blocks and
 *           no checksums, byte for byte the header python-lz4 writes for
 *           lz4.frame.compress(block_linked=False, content_checksum=False, store_size=False);
 *           each block is compressed by lz4_flex (lz4-wasm-nodejs). Reads any LZ4 frame
 *           (linked or independent blocks, with or without content size and checksums) with lz4js's
 *           block decoder.
 *   zstd    writes one standard zstd frame (content size included) with the reference zstd
 *           library built to WebAssembly (@bokuweb/zstd-wasm); reads any sequence of zstd
 *           frames, with or without a content size, with fzstd.
 *
 * Register them with kafkajs before producing or consuming: require('./codecs').register(kafkajs)
 */

const SnappyCodec = require('kafkajs-snappy')
const lz4wasm = require('lz4-wasm-nodejs')
const lz4js = require('lz4js')
const xxh32 = require('lz4js/xxh32.js')
const zstdWasm = require('@bokuweb/zstd-wasm')
const fzstd = require('fzstd')

// ---- LZ4 frame --------------------------------------------------------------------------

const LZ4_BLOCK_SIZE = 64 * 1024
// magic (LE), FLG = version 01 | block independence, BD = 64 KiB max block size, HC = header
// checksum: (xxh32(FLG BD, seed 0) >> 8) & 0xff.
const LZ4_FRAME_HEADER = Buffer.from([0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82])
const LZ4_UNCOMPRESSED = 0x80000000

function lz4Compress(data) {
  const parts = [LZ4_FRAME_HEADER]
  for (let at = 0; at < data.length; at += LZ4_BLOCK_SIZE) {
    const chunk = data.subarray(at, Math.min(at + LZ4_BLOCK_SIZE, data.length))
    // lz4-wasm-nodejs returns lz4_flex's compress_prepend_size: a u32 LE size, then one block
    const block = Buffer.from(lz4wasm.compress(chunk)).subarray(4)
    const size = Buffer.alloc(4)
    if (block.length < chunk.length) {
      size.writeUInt32LE(block.length)
      parts.push(size, block)
    } else {
      size.writeUInt32LE((LZ4_UNCOMPRESSED | chunk.length) >>> 0)
      parts.push(size, chunk)
    }
  }
  parts.push(Buffer.alloc(4)) // EndMark
  return Buffer.concat(parts)
}

const LZ4_MAGIC = 0x184d2204
const LZ4_BLOCK_MAX = { 4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024 }

// lz4js.decompress reads block checksums from the wrong place (before the block, not after),
// so the frame is parsed here and only the block decoder (lz4js.decompressBlock) is borrowed.
// Reads concatenated frames; linked blocks work because every block is decoded into one
// contiguous output; block and content checksums are verified.
function lz4Decompress(src) {
  let out = new Uint8Array(0)
  let outLen = 0
  const reserve = n => {
    if (outLen + n <= out.length) return
    const bigger = new Uint8Array(Math.max(outLen + n, out.length * 2))
    bigger.set(out.subarray(0, outLen))
    out = bigger
  }
  const fail = why => {
    throw new Error(`lz4: ${why}`)
  }
  let at = 0
  while (at < src.length) {
    if (src.length - at < 7) fail('truncated frame header')
    const magic = src.readUInt32LE(at)
    if ((magic & 0xfffffff0) === 0x184d2a50) {
      at += 8 + src.readUInt32LE(at + 4) // skippable frame
      continue
    }
    if (magic !== LZ4_MAGIC) fail(`bad magic 0x${magic.toString(16)}`)
    const flg = src[at + 4]
    const bd = src[at + 5]
    if (flg >> 6 !== 1) fail(`unsupported frame version ${flg >> 6}`)
    const blockChecksum = (flg & 0x10) !== 0
    const contentSize = (flg & 0x08) !== 0
    const contentChecksum = (flg & 0x04) !== 0
    if (flg & 0x01) fail('dictionary frames are not supported')
    const blockMax = LZ4_BLOCK_MAX[(bd >> 4) & 7]
    if (!blockMax) fail(`bad block size id ${(bd >> 4) & 7}`)
    const descEnd = at + 6 + (contentSize ? 8 : 0)
    if (src[descEnd] !== ((xxh32.hash(0, src, at + 4, descEnd - at - 4) >> 8) & 0xff)) {
      fail('frame header checksum mismatch')
    }
    if (contentSize) reserve(Number(src.readBigUInt64LE(at + 6)))
    at = descEnd + 1
    const frameStart = outLen
    for (;;) {
      const word = src.readUInt32LE(at)
      at += 4
      if (word === 0) break // EndMark
      const size = word & 0x7fffffff
      if (at + size + (blockChecksum ? 4 : 0) > src.length) fail('truncated block')
      if (blockChecksum && src.readUInt32LE(at + size) !== xxh32.hash(0, src, at, size) >>> 0) {
        fail('block checksum mismatch')
      }
      reserve(blockMax)
      if (word & LZ4_UNCOMPRESSED) {
        out.set(src.subarray(at, at + size), outLen)
        outLen += size
      } else {
        outLen = lz4js.decompressBlock(src, out, at, size, outLen)
      }
      at += size + (blockChecksum ? 4 : 0)
    }
    if (contentChecksum) {
      if (src.readUInt32LE(at) !== xxh32.hash(0, out, frameStart, outLen - frameStart) >>> 0) {
        fail('content checksum mismatch')
      }
      at += 4
    }
  }
  return Buffer.from(out.buffer, out.byteOffset, outLen)
}

const LZ4Codec = () => ({
  async compress(encoder) {
    return lz4Compress(encoder.buffer)
  },
  async decompress(buffer) {
    return lz4Decompress(buffer)
  },
})

// ---- ZSTD -------------------------------------------------------------------------------

let zstdReady = null
const ZSTDCodec = () => ({
  async compress(encoder) {
    await (zstdReady = zstdReady || zstdWasm.init())
    return Buffer.from(zstdWasm.compress(encoder.buffer, 3))
  },
  async decompress(buffer) {
    return Buffer.from(fzstd.decompress(buffer))
  },
})

function register({ CompressionTypes, CompressionCodecs }) {
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
  CompressionCodecs[CompressionTypes.LZ4] = LZ4Codec
  CompressionCodecs[CompressionTypes.ZSTD] = ZSTDCodec
}

module.exports = { register, SnappyCodec, LZ4Codec, ZSTDCodec, lz4Compress, lz4Decompress }
