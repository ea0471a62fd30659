"""trainer.workers"""
