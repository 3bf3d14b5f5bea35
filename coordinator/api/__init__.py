"""The gRPC edge of the coordinator: conversion, validation, errors and servicers."""
